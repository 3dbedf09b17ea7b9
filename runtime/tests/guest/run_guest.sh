#!/bin/sh
# Boot Debian's kernel in a 2-node qemu guest (TCG) with a busybox initramfs
# holding the static guest test, and report its verdict.
# usage: run_guest.sh GUEST_TEST_BINARY WORKDIR
# exit 0 = PASS, 1 = FAIL, 77 = SKIPPED (reason printed): qemu cannot start here.
set -u
bin=${1:?static guest test binary}
work=${2:?work directory}
skip() { echo "SKIPPED: $*"; exit 77; }

command -v qemu-system-x86_64 >/dev/null 2>&1 || skip "qemu-system-x86_64 not installed (apt-get install qemu-system-x86)"
kernel=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)
[ -n "$kernel" ] || skip "no /boot/vmlinuz-* (apt-get install linux-image-amd64)"
[ -r "$kernel" ] || skip "$kernel is not readable"
busybox=$(command -v busybox) || skip "busybox not installed (apt-get install busybox-static)"
file -L "$busybox" 2>/dev/null | grep -q "dynamically linked" && skip "$busybox is not static (apt-get install busybox-static)"
command -v cpio >/dev/null 2>&1 || skip "cpio not installed"
[ -x "$bin" ] || { echo "FAIL: $bin not built"; exit 1; }

rm -rf "$work/root" && mkdir -p "$work/root/bin" "$work/root/proc" "$work/root/sys" "$work/root/dev"
cp "$busybox" "$work/root/bin/busybox"
cp "$bin" "$work/root/guest_test"
cat >"$work/root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs dev /dev 2>/dev/null
/guest_test
echo "PMOSS-GUEST-RC=$?"
/bin/busybox poweroff -f
INIT
chmod +x "$work/root/init"
(cd "$work/root" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$work/initramfs.gz"

log="$work/console.log"
# 2 nodes x 2 cores (one socket and L3 each): groups of width l3 and node
# have two members to dispatch among (qemu's TCG CPUs show the guest no SMT
# siblings, so width core stays one thread here; test_runtime covers it)
timeout 120 qemu-system-x86_64 -accel tcg -m 1024 -smp 4,sockets=2,cores=2,threads=1 \
    -nographic -no-reboot \
    -object memory-backend-ram,id=m0,size=512M -object memory-backend-ram,id=m1,size=512M \
    -numa node,nodeid=0,cpus=0-1,memdev=m0 -numa node,nodeid=1,cpus=2-3,memdev=m1 \
    -kernel "$kernel" -initrd "$work/initramfs.gz" \
    -append "console=ttyS0 panic=-1 quiet rdinit=/init" >"$log" 2>&1
rc=$?
grep -aoE "(topology:|placement |schedule |run: |PMOSS-GUEST).*" "$log"
if grep -q "PMOSS-GUEST: PASS" "$log"; then
    exit 0
fi
if grep -q "PMOSS-GUEST: FAIL" "$log"; then
    exit 1
fi
if ! grep -q "Linux version" "$log"; then
    echo "--- qemu output ---"; tail -n 20 "$log"
    skip "qemu could not start a guest here (exit $rc)"
fi
echo "FAIL: the guest booted but the test gave no verdict (exit $rc); see $log"
tail -n 30 "$log"
exit 1
