"""Procedurally generated machines (issue #41): plausible servers sampled from public ranges.

A generated machine is a sampled `descriptors.Spec`, named `<family>-<seed>` (`gen-17`), so that
the offline pool can hold hundreds of machines beside the paper's five. Each draw picks a vendor,
then one public CPU generation of it (`PARTS`: the shapes and figures of that class of part, with
its sources), then a shape inside what that generation ships (sockets, NUMA mode, L3 domains, SMT)
and figures inside the vendor's published ranges (latencies, bandwidths, links, frequency).
docs/machine-model.md §17 lists the same ranges with the same sources.

Reproducible across processes and platforms: the stream is PCG64 seeded from the SHA-256 of
(family, seed), never Python's hash(), and only `Generator.random()` is drawn (a fixed conversion
of the bit stream); choices and integers are made from those doubles here, so a change of numpy's
distribution algorithms (NEP 19 allows them between releases) cannot change a machine. Figures
are rounded before they reach the YAML. tests/test_generate.py pins one seed's descriptor bytes.

Seed ranges: `GENERATED_SPLITS` says which seeds train, which validate (choosing anything) and
which are unseen (evaluation only); `pool.check_training_machines` enforces it for training pools.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import TypeVar

import numpy as np

from pmoss.contracts.errors import ContractError
from pmoss.contracts.machine import Machine
from pmoss.sim.descriptors import SPECS, Spec, machine_for

FAMILIES = ("gen",)  # name prefixes of generated machines; another family would add its own ranges
# Inclusive seed ranges. Training pools use "train" only; "validation" is for choosing things
# (datasets/pools/val-generated.yaml); "unseen" is evaluated, never trained on nor chosen with.
GENERATED_SPLITS = {"train": (0, 9_999), "validation": (100_000, 100_099), "unseen": (900_000, 900_099)}
MAX_RANGE = 10_000  # machines in one `gen:A-B` entry (a typo like gen:0-99999999 fails early)
MIN_THREADS, MAX_THREADS = 16, 512  # the range; 512 keeps the simulator and the model's tiles fast
MAX_TRIES = 1000  # shape draws before giving up (about 1 in 4 is rejected; 1000 never runs out)

VENDOR_WEIGHTS = {"intel": 0.40, "amd": 0.35, "arm": 0.15, "ibm": 0.10}  # x86 fleets dominate; POWER is rare
SOCKET_WEIGHTS = {1: 0.40, 2: 0.45, 4: 0.10, 8: 0.05}  # most servers are 1-2 sockets; 4/8S are scale-up niches


@dataclass(frozen=True)
class Part:
    """One public CPU generation: the shapes and the figures a generated machine of it draws from."""

    vendor: str
    label: str  # goes into the descriptor's `model`
    source: str
    sockets: tuple[int, ...]  # socket counts its platforms ship
    nodes_per_socket: tuple[int, ...]  # NPS / SNC / Altra NUMA modes (AMD 8: the BIOS's "L3 as NUMA")
    smt: tuple[int, ...]  # threads per core (1: SMT off or none)
    domain_cores: tuple[int, ...]  # cores per L3 domain (AMD CCX, POWER L3 region); () = one L3 per node (mesh)
    max_domains: int  # L3 domains per socket (AMD); unused otherwise
    max_cores: int  # per socket
    l1d_kib: float
    l2_kib: float  # per core
    l3_mib: float  # per L3 domain (AMD, POWER) or per core (mesh: the LLC slices of a node's cores)
    channels: int = 0  # memory channels per socket; GB/s = channels x MT/s x 8 B
    mts: tuple[int, ...] = ()
    socket_gbps: tuple[float, ...] = ()  # per-socket figure where no channel count applies (POWER)
    link_gbps: tuple[float, ...] = ()  # socket link, GB/s per direction
    links_2s: tuple[int, ...] = (1,)  # parallel links between the two sockets of a 2-socket machine
    ring_4s: bool = False  # 4 sockets joined in a ring (2 links each) instead of fully connected
    freq_ghz: tuple[float, float] = (2.0, 3.0)  # base clock range
    cores: tuple[int, ...] = ()  # POWER: cores per chip
    l4_mib: tuple[float, ...] = ()  # memory-buffer L4 per node (POWER Centaur); () = none


# The simulator's micro-architectural constants are per vendor (hardware.UARCH); the Sandy Bridge
# class's label holds "E5-46" so that hardware.UARCH_BY_MODEL gives it that core's constants.
PARTS: tuple[Part, ...] = (
    Part("intel", "Sandy/Ivy Bridge-EP class (Xeon E5-46xx/E5-26xx)", "Intel ARK Xeon E5-2690, E5-4620, E5-2697 v2; Intel E5-4600 platform (2 QPI links per socket, ring)",
         sockets=(1, 2, 4), nodes_per_socket=(1,), smt=(1, 2), domain_cores=(), max_domains=0, max_cores=12,
         l1d_kib=32, l2_kib=256, l3_mib=2.5, channels=4, mts=(1333, 1600), link_gbps=(14.4, 16.0), links_2s=(2,),
         ring_4s=True, freq_ghz=(2.0, 2.9)),
    Part("intel", "Skylake-SP/Cascade Lake-SP class", "Intel ARK Xeon Platinum 8160/8280, Gold 6148; Xeon Scalable platform brief (UPI 10.4 GT/s, SNC2, 8-socket glueless)",
         sockets=(1, 2, 4, 8), nodes_per_socket=(1, 2), smt=(1, 2), domain_cores=(), max_domains=0, max_cores=28,
         l1d_kib=32, l2_kib=1024, l3_mib=1.375, channels=6, mts=(2400, 2666, 2933), link_gbps=(20.8,), links_2s=(2, 3),
         freq_ghz=(2.0, 3.0)),
    Part("intel", "Ice Lake-SP class", "Intel ARK Xeon Platinum 8380, Gold 6338 (UPI 11.2 GT/s, 8 ch DDR4-3200, SNC2)",
         sockets=(1, 2), nodes_per_socket=(1, 2), smt=(1, 2), domain_cores=(), max_domains=0, max_cores=40,
         l1d_kib=48, l2_kib=1280, l3_mib=1.5, channels=8, mts=(2933, 3200), link_gbps=(22.4,), links_2s=(2, 3),
         freq_ghz=(2.0, 3.0)),
    Part("intel", "Sapphire Rapids class", "Intel ARK Xeon Platinum 8480+, Gold 6448Y; 4th Gen Xeon platform brief (UPI 2.0 16 GT/s, SNC4, up to 8 sockets)",
         sockets=(1, 2, 4, 8), nodes_per_socket=(1, 2, 4), smt=(1, 2), domain_cores=(), max_domains=0, max_cores=60,
         l1d_kib=48, l2_kib=2048, l3_mib=1.875, channels=8, mts=(4400, 4800), link_gbps=(32.0,), links_2s=(3, 4),
         freq_ghz=(1.9, 2.9)),
    Part("amd", "Zen 2 class (EPYC 7002)", "AMD EPYC 7742/7502 product pages; Dell 'NUMA configuration settings on AMD EPYC 2nd Generation' (CCX of 4 cores, 16 MB L3, NPS)",
         sockets=(1, 2), nodes_per_socket=(1, 2, 4, 8), smt=(1, 2), domain_cores=(4,), max_domains=16, max_cores=64,
         l1d_kib=32, l2_kib=512, l3_mib=16, channels=8, mts=(2933, 3200), link_gbps=(36.0,), links_2s=(3, 4),
         freq_ghz=(2.0, 3.1)),
    Part("amd", "Zen 3 class (EPYC 7003)", "AMD EPYC 7543/7763 product pages; AMD tuning guide 56338 (NPS, L3 as NUMA, xGMI-2)",
         sockets=(1, 2), nodes_per_socket=(1, 2, 4, 8), smt=(1, 2), domain_cores=(4, 8), max_domains=8, max_cores=64,
         l1d_kib=32, l2_kib=512, l3_mib=32, channels=8, mts=(3200,), link_gbps=(36.0,), links_2s=(3, 4),
         freq_ghz=(2.0, 3.5)),
    Part("amd", "Zen 4 class (EPYC 9004)", "AMD EPYC 9654/9124 product pages; EPYC 9004 architecture overview (12 ch DDR5-4800, xGMI-3 32 Gb/s x16)",
         sockets=(1, 2), nodes_per_socket=(1, 2, 4, 8), smt=(1, 2), domain_cores=(4, 8), max_domains=12, max_cores=96,
         l1d_kib=32, l2_kib=1024, l3_mib=32, channels=12, mts=(4800,), link_gbps=(64.0,), links_2s=(3, 4),
         freq_ghz=(2.0, 3.3)),
    Part("amd", "Zen 4c class (EPYC 97x4)", "AMD EPYC 9754 product page (16 CCX x 8 cores, 16 MB L3 each)",
         sockets=(1, 2), nodes_per_socket=(1, 2, 4), smt=(1, 2), domain_cores=(8,), max_domains=16, max_cores=128,
         l1d_kib=32, l2_kib=1024, l3_mib=16, channels=12, mts=(4800,), link_gbps=(64.0,), links_2s=(3, 4),
         freq_ghz=(2.0, 2.5)),
    Part("amd", "Zen 5c class (EPYC 9005 dense)", "AMD EPYC 9965 product page (12 CCDs x 16 cores, 32 MB L3 each, 12 ch DDR5-6000)",
         sockets=(1, 2), nodes_per_socket=(1, 2, 4), smt=(1, 2), domain_cores=(8, 16), max_domains=12, max_cores=192,
         l1d_kib=48, l2_kib=1024, l3_mib=32, channels=12, mts=(5600, 6000), link_gbps=(64.0,), links_2s=(3, 4),
         freq_ghz=(2.0, 2.5)),
    Part("arm", "Neoverse N1 class (Altra)", "AnandTech 'The Ampere Altra Review' (32 MB SLC for 80 cores, 8 ch DDR4-3200, 2 CCIX x16 links at 25 GT/s); Ampere Altra brief (monolithic/hemisphere/quadrant)",
         sockets=(1, 2), nodes_per_socket=(1, 2, 4), smt=(1,), domain_cores=(), max_domains=0, max_cores=80,
         l1d_kib=64, l2_kib=1024, l3_mib=0.4, channels=8, mts=(3200,), link_gbps=(50.0,), links_2s=(2,),
         freq_ghz=(2.6, 3.3)),
    Part("arm", "Neoverse V1 class (Graviton3)", "WikiChip 'AWS Graviton3' (64 cores, 1 MiB L2, 32 MiB L3, 8 ch DDR5-4800, 2.6 GHz)",
         sockets=(1,), nodes_per_socket=(1,), smt=(1,), domain_cores=(), max_domains=0, max_cores=64,
         l1d_kib=64, l2_kib=1024, l3_mib=0.5, channels=8, mts=(4800,), freq_ghz=(2.5, 2.7)),
    Part("arm", "Neoverse V2 class (Grace, Graviton4)", "NVIDIA Grace datasheet; Chips and Cheese Graviton4 article (96 cores, 2 MiB L2, 36 MB L3, 12 ch DDR5-5600, 2 sockets); link bandwidth assumed PCIe Gen5 x16 class (none published)",
         sockets=(1, 2), nodes_per_socket=(1,), smt=(1,), domain_cores=(), max_domains=0, max_cores=96,
         l1d_kib=64, l2_kib=2048, l3_mib=0.375, channels=12, mts=(5600,), link_gbps=(64.0,), links_2s=(1, 2),
         freq_ghz=(2.8, 3.1)),
    Part("ibm", "POWER8 class", "IBM Redpaper REDP-5283 (S822LC); POWER8 user's manual (8 MB L3 region per core, Centaur L4 16 MB per buffer, X-Bus)",
         sockets=(1, 2, 4), nodes_per_socket=(1,), smt=(4, 8), domain_cores=(1,), max_domains=12, max_cores=12,
         l1d_kib=64, l2_kib=512, l3_mib=8, socket_gbps=(115.0, 192.0, 230.0), link_gbps=(38.4,), links_2s=(1, 2, 3),
         freq_ghz=(2.9, 3.5), cores=(8, 10, 12), l4_mib=(64.0, 128.0)),
    Part("ibm", "POWER9 SMT4 scale-out class", "IBM POWER9 processor user's manual (10 MB L3 region per core pair, 8 ch DDR4-2666 direct attach); X-Bus figure taken from POWER8",
         sockets=(1, 2), nodes_per_socket=(1,), smt=(4,), domain_cores=(2,), max_domains=12, max_cores=24,
         l1d_kib=32, l2_kib=256, l3_mib=10, socket_gbps=(170.6,), link_gbps=(38.4,), links_2s=(1, 2),
         freq_ghz=(2.75, 3.8), cores=(16, 20, 24)),
    Part("ibm", "POWER9 SMT8 scale-up class", "IBM POWER9 processor user's manual (SMT8 core, 10 MB L3 region, Centaur buffered memory); X-Bus figure taken from POWER8",
         sockets=(2, 4), nodes_per_socket=(1,), smt=(8,), domain_cores=(1,), max_domains=12, max_cores=12,
         l1d_kib=32, l2_kib=512, l3_mib=10, socket_gbps=(230.0,), link_gbps=(38.4,), links_2s=(1, 2, 3),
         freq_ghz=(2.75, 3.8), cores=(8, 10, 12), l4_mib=(128.0,)),
)  # fmt: skip

# Idle load-to-use latency (ns) of the node's own memory, and what one socket hop adds. Sources:
# Intel MLC reports (Skylake-SP ~80 / ~140, the pool's intel-skx-4s), Intel's E5-4600 / E7-4800
# latency blog (~90-135 local, +50-60 per QPI hop), Chips and Cheese (Sapphire Rapids and Genoa
# ~105-120 ns, Zen 5 NPS1 ~130), AMD tuning guide 56338 (Milan 95-105 / 195), AnandTech Altra
# review (~105), NVIDIA Grace (~120), IBM REDP-5283 (POWER8 95 / 165).
LATENCY_NS = {"intel": (75.0, 115.0), "amd": (90.0, 125.0), "arm": (95.0, 125.0), "ibm": (85.0, 110.0)}
SOCKET_HOP_NS = {"intel": (50.0, 90.0), "amd": (80.0, 110.0), "arm": (60.0, 100.0), "ibm": (60.0, 80.0)}
# Another node of the same socket, relative to local: Skylake-SP SNC2 1.10, Sapphire Rapids SNC4
# ~1.12, Milan NPS4 1.16, Genoa NPS4 ~1.11 (same sources).
SAME_SOCKET = (1.05, 1.25)
EXTRA_HOP_NS = (40.0, 70.0)  # each further socket hop (E5-4600 ring: 140 -> 200 ns)
SOCKET_MEMORY_GIB = (128.0, 256.0, 512.0, 1024.0)  # per socket, split over its nodes (the model does not read it)

T = TypeVar("T")


class _Draws:
    """Uniform doubles from PCG64, and the choices made from them (module docstring)."""

    def __init__(self, family: str, seed: int):
        digest = hashlib.sha256(f"pmoss.sim.generate/{family}/{seed}".encode()).digest()
        self._rng = np.random.Generator(np.random.PCG64(int.from_bytes(digest, "little")))

    def u(self) -> float:
        return float(self._rng.random())

    def pick(self, options: Sequence[T], weights: Sequence[float] | None = None) -> T:
        w = [1.0] * len(options) if weights is None else list(weights)
        x = self.u() * sum(w)
        for option, wi in zip(options, w, strict=True):
            x -= wi
            if x < 0:
                return option
        return options[-1]

    def integer(self, lo: int, hi: int) -> int:
        """Uniform in [lo, hi], inclusive."""
        return lo + min(int(self.u() * (hi - lo + 1)), hi - lo)

    def uniform(self, lo: float, hi: float, digits: int) -> float:
        return round(lo + (hi - lo) * self.u(), digits)


@dataclass(frozen=True)
class _Shape:
    part: Part
    sockets: int
    nodes_per_socket: int
    smt: int
    domains: int  # L3 domains per socket
    cores: int  # per socket

    @property
    def key(self) -> tuple:
        return (self.part.vendor, self.sockets, self.nodes_per_socket, self.domains, self.cores, self.smt)


def _key(spec: Spec) -> tuple:
    return (spec.vendor, spec.sockets, spec.nodes_per_socket, spec.l3_per_socket, spec.cores_per_socket, spec.smt)


SHIPPED_SHAPES = frozenset(_key(s) for s in SPECS)  # a draw with a shipped machine's topology is redrawn


def _shape(d: _Draws) -> _Shape | None:
    """One shape draw; None when it breaks a limit (threads, cores) or twins a shipped descriptor
    (then an unseen machine would have a training twin)."""
    vendor = d.pick(list(VENDOR_WEIGHTS), list(VENDOR_WEIGHTS.values()))
    part = d.pick([p for p in PARTS if p.vendor == vendor])
    sockets = d.pick(part.sockets, [SOCKET_WEIGHTS[s] for s in part.sockets])
    nps, smt = d.pick(part.nodes_per_socket), d.pick(part.smt)
    if part.cores:  # POWER: a core count per chip, one L3 region per core (or core pair)
        cores = d.pick(part.cores)
        domains = cores // part.domain_cores[0]
    elif part.domain_cores:  # clustered L3 (AMD CCX): whole CCXs per node, at least 2 per socket
        per_domain = d.pick(part.domain_cores)
        domains = nps * d.integer(max(1, -(-2 // nps)), part.max_domains // nps)
        cores = domains * per_domain
    else:  # one mesh LLC per socket, cut by the NUMA mode: one L3 domain per node, 4-16 cores
        per_node = d.integer(4, min(16, part.max_cores // nps))
        domains, cores = nps, nps * per_node
    shape = _Shape(part, sockets, nps, smt, domains, cores)
    ok = MIN_THREADS <= sockets * cores * smt <= MAX_THREADS and cores <= part.max_cores
    return shape if ok and shape.key not in SHIPPED_SHAPES else None


def _socket_links(d: _Draws, part: Part, sockets: int) -> list[tuple[int, int]]:
    """Socket pairs joined by a link (a pair repeated = parallel links)."""
    if sockets == 1:
        return []
    if sockets == 2:
        return [(0, 1)] * d.pick(part.links_2s)
    if sockets == 4:  # E5-4600: a ring of 2 QPI links per socket; Skylake-SP / POWER8: fully connected
        return [(0, 1), (1, 2), (2, 3), (0, 3)] if part.ring_4s else [(a, b) for a in range(4) for b in range(a + 1, 4)]
    # 8 sockets, 3 links each, any two at most 2 hops apart (Intel's 8-socket glueless topology):
    # a ring plus the four long diagonals
    return sorted({tuple(sorted((s, (s + 1) % 8))) for s in range(8)} | {(s, s + 4) for s in range(4)})


def _hops(sockets: int, links: list[tuple[int, int]]) -> list[list[int]]:
    """[S][S] socket hops over the links, breadth first (every generated topology is connected)."""
    adj = {s: sorted({b for a, b in links if a == s} | {a for a, b in links if b == s}) for s in range(sockets)}
    out = []
    for src in range(sockets):
        dist, frontier = {src: 0}, [src]
        while frontier:
            reached = [v for u in frontier for v in adj[u] if v not in dist]
            for v in reached:
                dist.setdefault(v, dist[frontier[0]] + 1)
            frontier = sorted(set(reached))
        out.append([dist[t] for t in range(sockets)])
    return out


def _distances(shape: _Shape, links: list[tuple[int, int]], local: float, same: float, remote: float, hop: float) -> list[list[float]]:
    hops, nps = _hops(shape.sockets, links), shape.nodes_per_socket
    n = shape.sockets * nps

    def d(i: int, j: int) -> float:
        h = hops[i // nps][j // nps]
        return local if i == j else same if h == 0 else remote + (h - 1) * hop

    return [[d(i, j) for j in range(n)] for i in range(n)]


def generated_spec(seed: int, family: str = "gen") -> Spec:
    """The machine `<family>-<seed>`: the same Spec for the same seed in any process."""
    if family not in FAMILIES:
        raise ContractError(f"machine: generated family '{family}' is unknown (known: {', '.join(FAMILIES)})")
    if not isinstance(seed, int) or seed < 0:
        raise ContractError(f"machine: generated seed must be a non-negative integer, got {seed!r}")
    d = _Draws(family, seed)
    shape = next((s for s in (_shape(d) for _ in range(MAX_TRIES)) if s is not None), None)
    assert shape is not None, f"{family}-{seed}: no shape within the limits after {MAX_TRIES} draws"
    return _figures(d, f"{family}-{seed}", seed, shape)


def _figures(d: _Draws, name: str, seed: int, shape: _Shape) -> Spec:
    """Latencies, bandwidths, links, caches and clock of a drawn shape."""
    p, nps = shape.part, shape.nodes_per_socket
    local = d.uniform(*LATENCY_NS[p.vendor], 0)
    same = round(local * d.uniform(*SAME_SOCKET, 3), 0)
    remote = local + d.uniform(*SOCKET_HOP_NS[p.vendor], 0)
    hop = d.uniform(*EXTRA_HOP_NS, 0)
    pairs = _socket_links(d, p, shape.sockets)
    link = d.pick(p.link_gbps) if pairs else 0.0
    socket_gbps = d.pick(p.socket_gbps) if p.socket_gbps else p.channels * d.pick(p.mts) * 8 / 1000
    per_domain = shape.cores // shape.domains
    l3 = p.l3_mib if p.domain_cores else round(p.l3_mib * per_domain, 3)
    l4 = d.pick(p.l4_mib) if p.l4_mib else None
    memory = d.pick(SOCKET_MEMORY_GIB) / nps
    freq = d.uniform(*p.freq_ghz, 2)
    threads = shape.sockets * shape.cores * shape.smt
    nodes = f"{nps} node{'s' if nps > 1 else ''} per socket"
    model = f"Generated {shape.sockets}-socket {p.label}, {nodes}, {threads} threads (seed {seed})"
    return Spec(  # ASCII only: yaml.safe_dump would escape anything else
        name=name, vendor=p.vendor, model=model,
        source=f"pmoss.sim.generate: sampled within public figures of {p.label} parts (docs/machine-model.md section 17)",
        sockets=shape.sockets, nodes_per_socket=nps, l3_per_socket=shape.domains, cores_per_socket=shape.cores, smt=shape.smt,
        l1d_kib=p.l1d_kib, l2_kib=p.l2_kib, l3_mib=l3, node_memory_gib=memory, mem_bandwidth_gbps=round(socket_gbps / nps, 1),
        distance_ns=_distances(shape, pairs, local, same, remote, hop), links=[(a, b, link) for a, b in pairs],
        freq_ghz=freq, l4_mib=l4, generator="pmoss.sim.generate",
        notes=[
            f"Procedurally generated machine, family and seed {name} (pmoss.sim.generate; source=sim).",
            f"{p.label}: {p.source}.",
            f"{shape.cores} cores per socket in {shape.domains} L3 domains of {per_domain}, SMT{shape.smt}, {nodes};",
            f"  {local:g} ns local, {same:g} ns same socket, {remote:g} ns one socket hop (+{hop:g} ns per further hop).",
            "Ranges and their sources: docs/machine-model.md section 17 (Generated machines).",
        ],
    )  # fmt: skip


def generated_machine(seed: int, family: str = "gen") -> Machine:
    return machine_for(generated_spec(seed, family))


# ---- names and pool entries ----------------------------------------------------------------------
_NAME = re.compile(r"(?P<family>[a-z]+)-(?P<seed>0|[1-9][0-9]*)")
_RANGE = re.compile(r"(?P<family>[a-z]+):(?P<lo>[0-9]+)-(?P<hi>[0-9]+)")


def parse_name(name: str) -> tuple[str, int] | None:
    """(family, seed) of a generated machine's name (`gen-17`), else None."""
    m = _NAME.fullmatch(name)
    return (m["family"], int(m["seed"])) if m and m["family"] in FAMILIES else None


def expand_range(ref: str) -> list[str] | None:
    """The names of a pool entry `gen:A-B` (seeds A to B, both included), None for any other entry."""
    if not any(ref.startswith(f"{f}:") for f in FAMILIES):
        return None
    m = _RANGE.fullmatch(ref)
    lo, hi = (int(m["lo"]), int(m["hi"])) if m else (1, 0)
    if not m or lo > hi or hi - lo + 1 > MAX_RANGE:
        raise ContractError(f"machine: '{ref}' is not a generated range: write {ref.split(':')[0]}:A-B with A <= B (seeds A to B, inclusive; at most {MAX_RANGE})")
    return [f"{m['family']}-{s}" for s in range(lo, hi + 1)]


def split_of(seed: int) -> str | None:
    """The GENERATED_SPLITS range holding `seed`, None for a seed in none."""
    return next((k for k, (lo, hi) in GENERATED_SPLITS.items() if lo <= seed <= hi), None)


@cache
def cached_machine(family: str, seed: int) -> Machine:
    """Generated once per process (the pool's loader; treat it as read-only)."""
    return generated_machine(seed, family)
