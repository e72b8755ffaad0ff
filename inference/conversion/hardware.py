"""What the host's CPU offers for integer inference (from /proc/cpuinfo): named in tuning reports."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

# cpuinfo flag -> the name people know it by
FLAGS = {
    "avx2": "AVX2",
    "avx512f": "AVX-512",
    "avx512_vnni": "AVX512-VNNI",
    "avx_vnni": "AVX-VNNI",
    "amx_int8": "AMX-INT8",
    "amx_bf16": "AMX-BF16",
    "asimddp": "ARM dot product",
}


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The first processor's flags ("flags" on x86, "Features" on ARM); empty where unreadable."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or platform.machine()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return platform.processor() or platform.machine()


def has_vnni(flags: set[str] | None = None) -> bool:
    """Whether 8-bit dot products accumulate without 16-bit saturation (VNNI or AMX)."""
    flags = cpu_flags() if flags is None else flags
    return bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8", "asimddp"})


def describe(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """The CPU model and the instruction sets that matter for INT8 (``instruction_sets``)."""
    flags = cpu_flags(cpuinfo)
    return {
        "cpu": cpu_model(cpuinfo),
        "machine": platform.machine(),
        "instruction_sets": [name for flag, name in FLAGS.items() if flag in flags],
        "vnni": has_vnni(flags),
    }
