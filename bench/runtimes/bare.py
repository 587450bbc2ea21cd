"""bare: the host's Python environment, no container; the reference every runtime is compared with."""

from bench.errors import RuntimeConfigError
from bench.runtimes.base import Runtime


class Bare(Runtime):
    name = "bare"
    python = None  # the interpreter the sweep was planned with, or --python
    site_keys = ("env",)  # the batch script's exports; no container to bind or pass devices into

    def resolve_image(self, image, *, must_exist=True):
        if image:
            raise RuntimeConfigError(
                f"runtime bare runs the host's Python and takes no image (got {image!r}); "
                "choose the interpreter with --python")
        return None

    def check(self, spec):
        pass  # nothing is mounted: host paths are used as they are
