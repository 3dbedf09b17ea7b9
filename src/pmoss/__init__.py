"""P-MOSS: a learned spatial scheduler for main-memory indexes on NUMA and chiplet servers."""

import os

# Simulated data must be the same bytes on every x86-64 host (dvc.lock's hashes, docs/contracts.md
# "Reproducible bytes"). NumPy picks its SIMD kernels at import by the CPU; its AVX-512 ones round
# some results differently from the AVX2 ones, so the same params gave other raw-data bytes on an
# AVX-512 host. Keep NumPy on its AVX2 (x86-64-v3) kernels; it must be set before NumPy is first
# imported, which is why it is here. A caller's own setting wins; PMOSS_NATIVE_SIMD=1 turns it off.
if os.environ.get("PMOSS_NATIVE_SIMD") != "1":
    os.environ.setdefault("NPY_DISABLE_CPU_FEATURES", "X86_V4 AVX512_ICL AVX512_SPR")

__version__ = "0.1.0"
