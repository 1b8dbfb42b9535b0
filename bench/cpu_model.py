"""The CPU's model name, for the machine line of a benchmark's results."""


def cpu_model():
    """The first "model name" of /proc/cpuinfo, or "unknown CPU" where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"
