"""P-MOSS: a learned spatial scheduler for main-memory indexes on NUMA and chiplet servers."""

import os

# Data and models must be the same bytes on every x86-64 host (dvc.lock's hashes, docs/contracts.md
# "Reproducible bytes"). NumPy, torch's own kernels (ATen), oneDNN and MKL each pick their SIMD code
# by the CPU, and their AVX-512 code rounds some results differently from their AVX2 code: the same
# params gave other raw-data bytes, and other trained models, on an AVX-512 host. Keep all four on
# AVX2 (x86-64-v3). Each library reads its variable once, before its first kernel runs, which is why
# this is here. A caller's own setting wins; PMOSS_NATIVE_SIMD=1 turns it off.
SIMD_PIN = {
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",  # NumPy: no AVX-512 dispatch
    "ATEN_CPU_CAPABILITY": "avx2",  # torch's vectorised CPU kernels
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN's JIT kernels (some of torch's matmuls and softmax)
    "MKL_CBWR": "AVX2",  # MKL's conditional numerical reproducibility: its AVX2 branch on Intel and AMD alike
}
if os.environ.get("PMOSS_NATIVE_SIMD") != "1":
    for _name, _value in SIMD_PIN.items():
        os.environ.setdefault(_name, _value)

__version__ = "0.1.0"
