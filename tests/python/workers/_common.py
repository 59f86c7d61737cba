"""Helpers shared by the torchrun worker scripts (not collected by pytest)."""

import os
import sys
import traceback
import zlib

import torch
import torch.distributed as dist

# Explicit import: registration is idempotent with the torch.backends entry point.
import gotree  # noqa: F401


class Checker:
    """Counts checks; records failures with context instead of stopping at the first."""

    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failures = []
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failures.append(what)
            if len(self.failures) <= 20:
                print(f"[rank {self.rank}] FAIL {what}", flush=True)

    def expect_raises(self, fn, pattern, what, exc_types=(Exception,)):
        """fn() must raise an exception whose text contains every piece of `pattern`."""
        pieces = [pattern] if isinstance(pattern, str) else list(pattern)
        try:
            fn()
        except exc_types as e:  # noqa: PERF203
            text = f"{type(e).__name__}: {e}"
            ok = all(p in text for p in pieces)
            self.check(ok, f"{what}: exception text {text!r} lacks {pieces!r}")
            return e
        except BaseException as e:  # wrong type
            self.check(False, f"{what}: raised {type(e).__name__}: {e}")
            return e
        self.check(False, f"{what}: did not raise (expected {pieces!r})")
        return None

    def summary(self):
        """Prints the summary line the pytest side parses."""
        status = "OK" if not self.failures else "FAILED"
        print(
            f"GOTREE-CHECKS {self.name} rank={self.rank} world={self.world} "
            f"passed={self.passed} failed={len(self.failures)} {status}",
            flush=True,
        )

    def exit_now(self):
        """Summary, then exit without teardown (for a deliberately broken communicator)."""
        self.summary()
        sys.stdout.flush()
        os._exit(0 if not self.failures else 1)

    def finish(self, skip_teardown=False):
        """Summary, destroy the process group, exit non-zero on failure.

        skip_teardown exits without the interpreter's teardown (os._exit):
        for reference runs on another backend, whose own exit is not under
        test (gloo after torch.compile and DTensor sometimes aborts at exit
        with "terminate called without an active exception" once every
        check has passed and its group is destroyed).
        """
        self.summary()
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001
                traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        code = 0 if not self.failures else 1
        if skip_teardown:
            os._exit(code)
        sys.exit(code)


def seed_of(*parts):
    return zlib.crc32("/".join(str(p) for p in parts).encode())


def gen(*parts):
    return torch.Generator().manual_seed(seed_of(*parts))
