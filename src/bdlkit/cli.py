"""The ``bdlkit`` command line: ``fit``, ``evaluate``, ``reference``, ``compare``, ``bench``,
``list``, ``demo``.

``fit`` options are generated from :class:`bdlkit.runs.config.RunConfig` (one source of
truth with the Python API and ``--config`` YAML files); a method's hyperparameters
(``--lr`` ...) come from its ``build`` signature. Precedence: defaults < ``--config``
file < command-line options. Errors in the input are reported in one line, without
a traceback (set ``BDLKIT_DEBUG=1`` to see it); :mod:`bdlkit.cli_errors` says how each
kind of failure is reported.

The command list, its help texts and the examples of ``bdlkit --help`` are
:mod:`bdlkit.cli_commands`'s (the entry point, which answers them without importing torch).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import shlex
import sys
from pathlib import Path
from typing import Any

from bdlkit import algorithms, bench, data, models
from bdlkit.cli_commands import COMMANDS, top_parser
from bdlkit.cli_errors import run_guarded
from bdlkit.cli_options import (
    HYPER_PREFIX,
    add_config_options,
    add_method_options,
    given_keys,
    prescan_method,
    run_config,
)
from bdlkit.core import distributed
from bdlkit.core.errors import InputError
from bdlkit.core.lock import chain_name
from bdlkit.l2e import command as l2e_command
from bdlkit.meta_sgmcmc import command as meta_sgmcmc_command
from bdlkit.runs import console, ranks
from bdlkit.runs.config import (
    RunConfig,
    check_keys,
    method_hyperparameters,
)
from bdlkit.runs.yaml_files import load_yaml

_FORMATTER = argparse.RawDescriptionHelpFormatter
TENSORBOARD_CHAINS = ("--tensorboard with --chain-groups would mix the chains' curves in one "
                      "folder: drop it (each chain's log.jsonl holds its curve)")
FIT_EXAMPLES = """examples:
  bdlkit fit --method sgld --model mlp --data digits --steps 500 --seed 0 --out runs/sgld
  bdlkit fit --method sgld --data mnist --epochs 10 --lr 0.1 --eval-every 100 --out runs/m
  bdlkit fit --config experiment.yaml --out runs/exp      (YAML keys: the options below;
                                                           method options under `hyper:`)
  bdlkit fit --method map --model mypkg.net:Tiny --model-kwargs '{"width": 4}' --out runs/t
                                                           (your network: Tiny(input_shape,
                                                           out_features, **model_kwargs)
                                                           returning a torch.nn.Module)
  bdlkit fit --resume runs/sgld                           (continue an interrupted run)
  bdlkit fit --resume runs/sgld --lr 0.01                 (... after a NaN stop, with a
                                                           smaller step size)
  bdlkit fit --resume runs/sgld --threads 4 --accept threads
                                                          (... at another thread count:
                                                           recorded under changes:)"""


def _fit_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("fit", allow_abbrev=False,
                       help=COMMANDS["fit"],
                       description="Fit a method and write a run directory (config.yaml, "
                       "log.jsonl, checkpoints/, samples/, metrics.json, report.md).",
                       epilog=FIT_EXAMPLES + "\n\nmethod options: see `bdlkit fit --method M "
                       "--help`", formatter_class=_FORMATTER)
    add_config_options(p)
    p.add_argument("--config", metavar="FILE", help="YAML file with any of these options")
    p.add_argument("--out", metavar="DIR", help="new run directory to write")
    p.add_argument("--resume", metavar="DIR", help="continue the interrupted run in DIR")
    p.add_argument("--accept", metavar="FIELD[,FIELD]", help="with --resume: continue with "
                   "a deliberate change of the run's recorded threads (--threads N), device, "
                   "log_every or eval_every (edited in DIR/config.yaml), recorded under "
                   "changes: in config.yaml; the run is then not bit-exact with either")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run in --out")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--compile", action="store_true", default=argparse.SUPPRESS,
                   help="run the steps compiled with torch.compile: the element-wise update "
                   "of a network step (forward/backward stay eager); falls back to eager "
                   "steps with a warning where a step cannot be compiled")
    p.add_argument("--tensorboard", metavar="DIR", help="also write each logged entry's "
                   "scalars to TensorBoard event files in DIR, one folder per run (needs "
                   "pip install 'bdlkit[tensorboard]'; allowed with --resume)")
    p.add_argument("--standardize", action="store_true",
                   help="standardise every input feature of a .npz/.csv data file with the "
                   "training mean and std (the file's standardize option, recorded in "
                   "config.yaml under data_kwargs)")
    return p


REFERENCE_EXAMPLES = """examples:
  bdlkit reference hmc --model mlp --data digits --out refs/digits
  bdlkit reference hmc --data digits --model-kwargs '{"hidden": [50]}' --out refs/d50
  bdlkit reference nuts --data digits --model-kwargs '{"hidden": [10]}' --steps 600 \\
      --max-tree-depth 7 --out refs/d10
  bdlkit evaluate runs/csghmc --reference refs/digits"""


def _reference_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("reference", allow_abbrev=False,
                       help=COMMANDS["reference"],
                       description="Run several full-batch MCMC chains of a small Bayesian "
                       "network and write the test-set predictive probabilities with their "
                       "convergence (split R-hat, ESS) to DIR. Rerunning reuses finished "
                       "chains and resumes interrupted ones. Defaults: 400 iterations, the "
                       "first half burn-in; hmc: trajectory length (pi/2) x prior scale, step "
                       "size adapted over 150 iterations; nuts: warm-up = burn-in.",
                       epilog=REFERENCE_EXAMPLES, formatter_class=_FORMATTER)
    p.add_argument("method", metavar="METHOD", choices=("hmc", "nuts"), help="hmc or nuts")
    add_config_options(p, skip=("method", "eval_every", "eval_samples", "threads"))
    p.add_argument("--chains", type=int, default=4, help="independent chains (default 4)")
    p.add_argument("--workers", type=int, default=None,
                   help="chains run in parallel processes (default: min(chains, CPUs))")
    p.add_argument("--out", required=True, metavar="DIR", help="reference folder to write")
    p.add_argument("--overwrite", action="store_true", help="replace a reference in --out")
    return p


def cmd_reference(args: argparse.Namespace, argv: list[str]) -> int:
    from bdlkit.runs import reference

    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)
              if hasattr(args, f.name)}
    values["method"] = args.method
    values["hyper"] = {k[len(HYPER_PREFIX):]: v for k, v in vars(args).items()
                       if k.startswith(HYPER_PREFIX)}
    cfg = run_config(reference.with_defaults(values), given_keys(values), None)
    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers must be >= 1, got {args.workers}")
    ref = reference.build(cfg, args.out, chains=args.chains, workers=args.workers,
                          overwrite=args.overwrite, command=shlex.join(["bdlkit", *argv]))
    print((Path(args.out) / "report.md").read_text())
    conv = ref.manifest["convergence"]["rhat_split"]
    print(f"split R-hat of the test predictive: median {conv['median']:.4f}, max "
          f"{conv['max']:.4f}; reference: {args.out}")
    return 0


def cmd_fit(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)
             if hasattr(args, f.name)}
    hyper = {k[len(HYPER_PREFIX):]: v for k, v in vars(args).items()
             if k.startswith(HYPER_PREFIX)}
    progress = not args.no_progress
    with console.fit_progress(sys.stderr), console.fit_callbacks(args.tensorboard) as callbacks:
        return _fit(args, parser, given, hyper, progress, callbacks)


def _fit(args: argparse.Namespace, parser: argparse.ArgumentParser, given: dict[str, Any],
         hyper: dict[str, Any], progress: bool, callbacks: list[Any]) -> int:
    accept = tuple(a.strip() for a in (args.accept or "").split(",") if a.strip())
    if accept and not args.resume:
        raise InputError("--accept goes with --resume DIR (a change to a run it continues); "
                         "a new run records its options as given")
    if args.resume:
        if (set(given) - {"threads"} or len(hyper) > 1 or args.config or args.out
                or args.overwrite or args.standardize):
            raise InputError("--resume DIR takes every option from DIR/config.yaml but the "
                             "method's step size (e.g. --lr after a NaN stop) and --threads; "
                             "pass no other options (to change them, start a new run with "
                             "--out)")
        step_size = next(iter(hyper.items()), None)
        layout = ranks.launch_layout(args.resume)
        if layout[0] > 1 and args.tensorboard:
            raise InputError(TENSORBOARD_CHAINS)
        with distributed.joined(*layout) as topology:
            note = ranks.finished_note(args.resume, layout[0]) if step_size is None else None
            if note and topology.rank == 0:
                print(note, file=sys.stderr)
            output = ranks.resume(args.resume, topology,
                                  progress=progress and topology.rank == 0, step_size=step_size,
                                  threads=given.get("threads"), accept=accept,
                                  callbacks=callbacks if topology.writer else None)
        return _print_run(output, Path(args.resume), topology)
    values: dict[str, Any] = {}
    if args.config:
        values = load_yaml(args.config)
        check_keys(values, [f.name for f in dataclasses.fields(RunConfig)], args.config)
        if values.get("changes"):  # [] (a run's config.yaml as a template) changes nothing
            raise InputError(f"{args.config}: key 'changes' is the record `bdlkit fit "
                             "--resume` writes into a run's config.yaml (the options it "
                             "changed, and when); a new run has none: remove the key")
    if "steps" in given or "epochs" in given:  # a command-line length replaces the file's
        values.pop("epochs" if "steps" in given else "steps", None)
    values.update(given)
    kwargs = values.get("data_kwargs") or {}
    if args.standardize and isinstance(kwargs, dict):  # the data file's option
        values["data_kwargs"] = {**kwargs, "standardize": True}
    if "method" not in values:
        parser.error("--method is required (or set `method:` in --config); methods: "
                     + ", ".join(sorted(algorithms.METHODS)))
    if not isinstance(values.get("hyper") or {}, dict):
        raise InputError(f"{args.config}: key 'hyper' must be a mapping of method options to "
                         f"values, got {values['hyper']!r}")
    values["hyper"] = {**(values.get("hyper") or {}), **hyper}
    if args.out is None:
        parser.error("--out DIR is required (the run directory to write)")
    cfg = run_config(values, given_keys({**given, "hyper": hyper}), args.config)
    if cfg.chain_groups > 1 and args.tensorboard:
        raise InputError(TENSORBOARD_CHAINS)
    with distributed.joined(cfg.chain_groups, cfg.device) as topology:
        output = ranks.fit(cfg, args.out, topology, overwrite=args.overwrite,
                           progress=progress and topology.rank == 0,
                           callbacks=callbacks if topology.writer else None)
    return _print_run(output, Path(args.out), topology)


def _unknown_option(option: str, method: str | None, parser: argparse.ArgumentParser) -> None:
    if method is not None and method not in algorithms.METHODS:  # --method scorevi --lr 1:
        try:  # the misspelt method is why --lr is unknown: say that (did you mean ...?)
            algorithms.get_method(method)
        except ValueError as err:
            parser.error(str(err))
    valid = [a for action in parser._actions for a in action.option_strings]  # noqa: SLF001
    close = difflib.get_close_matches(option.split("=")[0], valid, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    if method in algorithms.METHODS:
        opts = ", ".join("--" + n.replace("_", "-") for n in method_hyperparameters(method))
        hint += f" (options of method {method!r}: {opts or 'none'})"
    parser.error(f"unrecognized option {option}{hint}")


def _print_run(output: Any, run_dir: Path, topology: distributed.Topology) -> int:
    """A fit's summary; on several processes rank 0 prints its chain's (and where the
    other chains are), the other ranks nothing."""
    if topology.rank != 0:
        return 0
    _print_metrics(output.metrics, ranks.chain_folder(run_dir, topology))
    if topology.chain_groups > 1:
        print(f"{topology.chain_groups} chains: {run_dir}/{chain_name(0)} ... "
              f"{chain_name(topology.chain_groups - 1)}; cross-chain R-hat and ESS: "
              f"{run_dir / ranks.CHAINS_FILE}")
    return 0


def _print_metrics(values: dict[str, Any], run_dir: Path) -> int:
    """The run's compact summary (:func:`bdlkit.runs.console.summary_lines`) on stdout."""
    print(f"run directory: {run_dir}")
    for line in console.summary_lines(values):
        print(line)
    print(f"all metrics: {run_dir / 'metrics.json'}; report: {run_dir / 'report.md'}")
    return 0


def _positive(value: int | None, flag: str) -> int | None:
    if value is not None and value < 1:
        raise InputError(f"{flag} must be an integer >= 1, got {value}; omit it to use all")
    return value


def cmd_evaluate(args: argparse.Namespace) -> int:
    from bdlkit.runs import directory as run

    num_draws = _positive(args.num_draws, "--num-draws")
    max_test = _positive(args.max_test, "--max-test")
    bar = console.EvaluationBar(sys.stderr, bar=not args.no_progress)
    with contextlib.closing(bar) as progress:
        values = run.reevaluate(args.run_dir, ood=args.ood, reference=args.reference,
                                corruptions=args.corruptions, num_draws=num_draws,
                                max_test=max_test, progress=progress)
    return _print_metrics(values, Path(args.run_dir))


def cmd_bench(args: argparse.Namespace, argv: list[str]) -> int:
    command = "bdlkit " + " ".join(argv)
    rows = tuple(r for r in (args.rows or "").split(",") if r)
    settings = tuple(r for r in (args.settings or "").split(",") if r)
    meta = tuple(m for m in (args.meta_params or "").split(",") if m)
    bench.run_suite(args.suite, args.out, quick=args.quick, seed=args.seed, command=command,
                    rows=rows, reuse=args.reuse, settings=settings, meta_params=meta)
    print((Path(args.out) / "results.md").read_text())
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from bdlkit.runs import compare

    rows = compare.compare(args.runs)
    print(compare.markdown(rows), end="")
    if args.out:
        print("written: " + ", ".join(str(p) for p in compare.write(rows, args.out)))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from bdlkit.bench import demo

    print(demo.run(Path(args.out), steps=args.steps, seed=args.seed, include_weak=args.all))
    return 0


def list_components() -> None:
    """Print the methods, models, data sets and benchmark suites bdlkit knows."""
    print("methods:")
    for name in sorted(algorithms.METHODS):
        kind = algorithms.kind_of(name)
        print(f"  {name:<14} [{kind}] {algorithms.DESCRIPTIONS.get(name, '')}")
    print("models:")
    for name in sorted(models.MODELS):
        doc = (models.MODELS[name].__doc__ or "").strip().splitlines()
        print(f"  {name:<14} {doc[0] if doc else ''}")
    print("datasets:")
    for name, desc in data.DATASETS.items():
        print(f"  {name:<44} {desc}")
    print("benchmark suites:")
    for name, desc in bench.DESCRIPTIONS.items():
        print(f"  {name:<14} {desc}")


def build_parser() -> tuple[argparse.ArgumentParser, ...]:
    parser, sub = top_parser()
    fit = _fit_parser(sub)
    ref = _reference_parser(sub)
    p = sub.add_parser("evaluate", help=COMMANDS["evaluate"],
                       epilog="examples:\n  bdlkit evaluate runs/sgld\n  bdlkit evaluate "
                       "runs/mnist --ood notmnist --corruptions\n  bdlkit evaluate runs/mnist "
                       "--corruptions --num-draws 20 --max-test 2000   (quicker, on fewer "
                       "draws and test rows)\n  bdlkit evaluate runs/c10 "
                       "--reference hmc_probs.npy", formatter_class=_FORMATTER)
    p.add_argument("run_dir", metavar="DIR", help="a run directory written by bdlkit fit")
    p.add_argument("--ood", metavar="DATA",
                   help="OOD data set: AUROC/AUPR of entropy, max probability and MI")
    p.add_argument("--reference", metavar="DIR|FILE",
                   help="reference (HMC) test probabilities: a folder written by `bdlkit "
                        "reference`, or a .npy/.npz/.safetensors file of shape (n, K): "
                        "agreement and total variation")
    p.add_argument("--corruptions", action="store_true",
                   help="accuracy/NLL/ECE under 6 image corruptions x 5 severities")
    p.add_argument("--num-draws", type=int, metavar="N",
                   help="average over N draws: N evenly spaced kept draws of a sampler "
                        "(ending at the last), N draws of a VI approximation, the first N "
                        "members of an ensemble (all if fewer); default: every kept draw, "
                        "the run's --eval-samples VI draws (recorded as num_draws)")
    p.add_argument("--max-test", type=int, metavar="M",
                   help="evaluate on the first M test rows only (and the first M of the "
                        "--ood data; not stratified); recorded as num_test")
    p.add_argument("--no-progress", action="store_true",
                   help="hide the progress bar (the estimate line stays)")
    p = sub.add_parser("compare", help=COMMANDS["compare"], formatter_class=_FORMATTER,
                       description="Print one table of the metrics.json of several run "
                       "folders (with the draws each averaged and a dash for a metric a run "
                       "lacks); --out also writes it as JSON and Markdown, with a figure.",
                       epilog="examples:\n  bdlkit compare runs/sghmc runs/advi runs/ensemble"
                       "\n  bdlkit compare runs/* --out runs/comparison")
    p.add_argument("runs", nargs="+", metavar="DIR", help="run folders written by bdlkit fit")
    p.add_argument("--out", metavar="DIR", help="also write comparison.json, comparison.md "
                   "and comparison.png into DIR")
    p = sub.add_parser("bench", help=COMMANDS["bench"],
                       epilog="examples:\n  bdlkit bench digits --quick --out "
                       "benchmarks/results/digits\n\nsuites: " + ", ".join(bench.SUITES),
                       formatter_class=_FORMATTER)
    p.add_argument("suite", help="suite name (see `bdlkit list`)")
    p.add_argument("--quick", action="store_true", help="a short version for a smoke test")
    p.add_argument("--out", required=True, metavar="DIR", help="where results are written")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rows", metavar="A,B", help="synthetic/posteriordb: run just these rows ...")
    p.add_argument("--settings", metavar="S,T", help="... on just these settings ...")
    p.add_argument("--reuse", metavar="DIR", help="... and take the other rows from the "
                   "results.json in DIR (same plan)")
    p.add_argument("--meta-params", metavar="F,G", help="l2e-sampling: also measure these "
                   "L2E meta-parameter files (`bdlkit meta-train l2e` output)")
    p = sub.add_parser("meta-train", formatter_class=_FORMATTER,
                       help=COMMANDS["meta-train"],
                       description="Meta-train a learned sampler's networks on bdlkit's "
                       "offline task distribution; `bdlkit meta-train LEARNER --help` lists "
                       "a learner's options.",
                       epilog="examples:\n  bdlkit meta-train l2e --out runs/l2e-meta "
                       "--budget-minutes 5\n  bdlkit meta-train meta-sgmcmc --out "
                       "runs/msg-meta --budget-minutes 5")
    learners = p.add_subparsers(dest="learner", required=True, metavar="LEARNER")
    l2e_command.add_parser(learners, _FORMATTER)
    meta_sgmcmc_command.add_parser(learners, _FORMATTER)
    sub.add_parser("list", help=COMMANDS["list"],
                   epilog="example:\n  bdlkit list", formatter_class=_FORMATTER)
    p = sub.add_parser("demo", help=COMMANDS["demo"],
                       epilog="examples:\n  bdlkit demo --steps 1500 --out runs/demo\n"
                       "  bdlkit demo --all          (also the methods known to be weak on "
                       "networks)", formatter_class=_FORMATTER)
    p.add_argument("--steps", type=int, default=1500, help="steps per method")
    p.add_argument("--all", action="store_true", help="also run the methods known to be "
                   "weak on networks (left out by default; each is shown with its reason)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/demo", metavar="DIR",
                   help="where the report goes (replaced on each demo)")
    return parser, fit, ref


def main(argv: list[str] | None = None) -> int:
    parser, fit_parser, ref_parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    method = prescan_method(argv) if argv[:1] == ["fit"] else None
    if argv[:1] == ["reference"]:
        method = next((a for a in argv[1:] if a in ("hmc", "nuts")), None)
    sub_parser = ref_parser if argv[:1] == ["reference"] else fit_parser
    if method in algorithms.METHODS:
        add_method_options(sub_parser, method)
    args, extra = parser.parse_known_args(argv)
    if extra:
        if args.command in ("fit", "reference"):
            _unknown_option(extra[0], method, sub_parser)
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return run_guarded(args.command, args, lambda: _dispatch(args, argv, fit_parser))


def _dispatch(args: argparse.Namespace, argv: list[str], fit_parser: Any) -> int:
    several = args.command == "fit" or (args.command == "meta-train" and args.learner == "l2e")
    if distributed.launched() and not several:
        raise InputError(f"`bdlkit {args.command}` runs in one process; under torchrun only "
                         "`fit` and `meta-train l2e` use several: run it without torchrun")
    if args.command == "fit":
        return cmd_fit(args, fit_parser)
    if args.command == "reference":
        return cmd_reference(args, argv)
    if args.command == "evaluate":
        return cmd_evaluate(args)
    if args.command == "bench":
        return cmd_bench(args, argv)
    if args.command == "compare":
        return cmd_compare(args)
    if args.command == "demo":
        return cmd_demo(args)
    if args.command == "meta-train":
        learner = l2e_command if args.learner == "l2e" else meta_sgmcmc_command
        return learner.run(args, argv)
    list_components()
    return 0


if __name__ == "__main__":
    sys.exit(main())
