"""Facts about this machine that llama.cpp's defaults get wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def physical_cores() -> int:
    """Physical cores: decode is memory-bound, and hyper-threads only add contention."""
    if sys.platform.startswith("linux"):
        cores = _linux_physical_cores(Path("/proc/cpuinfo"))
        if cores:
            return cores
    elif sys.platform == "darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "hw.physicalcpu"], capture_output=True, text=True, timeout=2)
            return max(1, int(out.stdout.strip()))
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    return max(1, os.cpu_count() or 1)


def _linux_physical_cores(cpuinfo: Path) -> int:
    try:
        text = cpuinfo.read_text()
    except OSError:
        return 0
    pairs = set()
    physical = core = None
    for line in text.splitlines() + [""]:
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "physical id":
            physical = value.strip()
        elif key == "core id":
            core = value.strip()
        elif not line.strip():
            if core is not None:
                pairs.add((physical, core))
            physical = core = None
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else len(pairs)
    return min(len(pairs), allowed) if pairs else 0


def cpu_name() -> str:
    """The processor's model name, where the system says it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()
