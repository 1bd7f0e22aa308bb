"""The ``bdlkit`` entry point: its commands, their one-line help, and the answer to
``bdlkit``, ``bdlkit --help`` and a misspelt command given without importing torch.

Building the full parser (:mod:`bdlkit.cli`) imports every method, model and suite
(torch among them, about 2 s of a 2-core machine's time before anything prints); the
top-level help needs none of it. :func:`main` therefore answers a command line that names
no command from :data:`COMMANDS` alone and hands every other one to
:func:`bdlkit.cli.main`, which builds its parsers with the same help texts.

Examples::

    bdlkit list
    bdlkit fit --method sgld --model mlp --data digits --steps 500 --seed 0 --out runs/sgld
    bdlkit fit --resume runs/sgld
    bdlkit evaluate runs/sgld
    bdlkit reference hmc --model mlp --data digits --out refs/digits
    bdlkit evaluate runs/sgld --reference refs/digits
    bdlkit evaluate runs/mnist --ood notmnist --corruptions --num-draws 20 --max-test 2000
    bdlkit compare runs/sgld runs/advi runs/ensemble
    bdlkit bench digits --quick --out benchmarks/results/digits
    bdlkit demo
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import NoReturn

#: each command of ``bdlkit`` and its one-line help, in the order ``--help`` lists them
COMMANDS = {
    "fit": "run a method on a model and data set into a run directory",
    "reference": "build and cache an HMC/NUTS reference predictive for a small BNN",
    "evaluate": "recompute metrics.json and report.md of a run",
    "compare": "one table (and figure) of several runs' metrics, side by side",
    "bench": "run a benchmark suite side by side",
    "meta-train": "meta-train a learned sampler (L2E or Meta-SGMCMC)",
    "list": "list methods, models, data sets and suites",
    "demo": "compare the methods on digits (< 3 minutes)",
}
DESCRIPTION = "Bayesian deep learning made practical."
EPILOG = "examples:" + __doc__.split("Examples::")[1]
FORMATTER = argparse.RawDescriptionHelpFormatter


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one ``bdlkit: error:`` line (exit status 2),
    pointing at ``--help`` instead of printing the (long) usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"bdlkit: error: {one_line(message)} (see `{self.prog} --help`)\n")


def one_line(message: object) -> str:
    """``message`` with its line breaks (YAML or torch messages have them) made spaces."""
    return re.sub(r"\s*\n\s*", " ", str(message)).strip()


def top_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """The ``bdlkit`` parser and its (empty) group of commands; :func:`main` adds each
    command bare, :mod:`bdlkit.cli` with its options."""
    parser = OneLineParser(prog="bdlkit", description=DESCRIPTION, epilog=EPILOG,
                          formatter_class=FORMATTER, allow_abbrev=False)
    return parser, parser.add_subparsers(dest="command", required=True, metavar="COMMAND")


def main(argv: list[str] | None = None) -> int:
    """Run the ``bdlkit`` command line on ``argv`` (default ``sys.argv[1:]``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:  # no command: help or a one-line error, at once
        parser, sub = top_parser()
        for name, text in COMMANDS.items():
            sub.add_parser(name, help=text)
        close = difflib.get_close_matches(argv[0], COMMANDS, n=1) if argv else []
        if close and not argv[0].startswith("-"):
            parser.error(f"unknown command {argv[0]!r}; did you mean {close[0]!r}? (commands: "
                         f"{', '.join(COMMANDS)})")
        parser.parse_args(argv)  # prints the help or the error and exits
    from bdlkit.cli import main as full_main

    return full_main(argv)
