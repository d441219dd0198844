"""fwcompare: which framework runs a Transformer faster, leaner and more
accurately on this machine? PyTorch, TensorFlow and JAX measured side by side.

exit codes:
  0    done
  1    run, report: a study or a cell (status error or timeout) failed;
       doctor: a check failed; compare: its gate (--fail-above,
       --fail-below) found a cell beyond it
  2    bad input, nothing measured: params, overrides, paths, an output
       folder another run is writing, or a device: gpu run where the doctor
       finds the GPU unusable
  130  interrupted (Ctrl-C or SIGTERM): finished cells are kept; run again
       to resume
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from .. import __version__
from ..core.atomic import UnreadableFile
from ..core.folder_lock import FolderInUse
from ..core.paths import CheckoutError
from ..suite.doctor import DoctorError
from ..suite.params import ParamsError
from . import compare, doctor, env, export, listing, merge, report, run, submit, validate
from .base import BAD_INPUT, DONE, FAILED, INTERRUPTED  # noqa: F401 (the exit codes, here too)

# The commands, one module each (its HELP, EXAMPLES, add_arguments and main),
# in the order of ``fwcompare --help``.
VERBS = {"list": listing, "run": run, "merge": merge, "submit": submit, "validate": validate,
         "env": env, "compare": compare, "export": export, "doctor": doctor, "report": report}


def build_parser() -> argparse.ArgumentParser:
    """Every command, with its options and an example in its ``--help``."""
    from ..studies import STUDIES

    studies = list(STUDIES)
    common = argparse.ArgumentParser(add_help=False)
    loud = common.add_mutually_exclusive_group()
    loud.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                      help="print no progress lines (results, warnings and errors only)")
    loud.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                      help="debug logging, and the traceback of an error")
    ap = argparse.ArgumentParser(
        prog="fwcompare", description=__doc__, parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  fwcompare list models\n"
               "  fwcompare run inference_sweep --models bert-base-cased --batch-sizes 1,8\n"
               "  fwcompare report --profile quick   (what `make report` runs)\n\n"
               "`fwcompare COMMAND --help` tells a command's options, with an example.")
    ap.add_argument("--version", action="version", version=f"fwcompare {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    for name, verb in VERBS.items():
        p = sub.add_parser(name, help=verb.HELP, description=verb.HELP, parents=[common],
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog=f"example{'s' if len(verb.EXAMPLES) > 1 else ''}:\n  "
                                  + "\n  ".join(verb.EXAMPLES))
        p.set_defaults(fn=verb.main)
        verb.add_arguments(p, studies)
    return ap



def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.quiet = getattr(args, "quiet", False)
    logging.basicConfig(level=logging.DEBUG if getattr(args, "verbose", False) else
                        logging.WARNING if args.quiet else logging.INFO, format="%(message)s")
    previous = _stop_on_sigterm()
    try:
        code = args.fn(args)
        sys.stdout.flush()  # a reader that left surfaces here (below), not at Python's exit
        return code
    except (DoctorError, CheckoutError, UnreadableFile, FolderInUse) as exc:  # not the params
        _traceback(args)
        print(f"fwcompare: {exc}", file=sys.stderr)
        return BAD_INPUT
    except ParamsError as exc:
        _traceback(args)
        print(f"fwcompare: invalid params: {exc}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt:
        print("fwcompare: interrupted; finished cells are kept, run again to resume",
              file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # `fwcompare list models | head -2`: the reader left, quietly
        try:  # so that Python's flush at exit finds no pipe to fail on either
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is no file (captured, replaced)
            pass
        return FAILED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _traceback(args) -> None:
    """Under ``-v``, where an error was raised."""
    if getattr(args, "verbose", False):
        import traceback

        traceback.print_exc()


def _stop_on_sigterm():
    """SIGTERM (``timeout``, ``kill``, a scheduler's stop) ends a command as
    Ctrl-C does, through the clean-up that ends its workers, launches and
    fork servers: Python's default would leave them running. Returns the
    handler it replaced (None off the main thread, where none can be set)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    return signal.signal(signal.SIGTERM, stop)
