"""Run directories: ``bdlkit fit`` / ``bdlkit evaluate`` from a :class:`~bdlkit.runs.config.RunConfig`.

The data flow of one run, top to bottom::

    config → data set → network + likelihood + prior (BayesianModel) → algorithm
           → Runner (log.jsonl, checkpoints/, samples/) → Result → BMA predictive
           → metrics.json → report.md (+ reliability.png, history.png)

A run directory holds ``config.yaml`` (the fully resolved configuration),
``log.jsonl``, ``checkpoints/``, ``samples/`` (samplers), ``metrics.json`` and
``report.md``. ``metrics.json`` holds only quantities that are a deterministic
function of the configuration (no wall times), so an interrupted and resumed run
writes exactly the same file as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bdlkit import data as data_module
from bdlkit import evaluation, metrics, models
from bdlkit.algorithms import get_method
from bdlkit.core.distributed import SINGLE, Topology
from bdlkit.core.errors import CorruptFileError, InputError
from bdlkit.core.lock import run_lock
from bdlkit.core.serialization import (
    load_json,
    remove_stale_temps,
    save_json,
    state_from_tensors,
)
from bdlkit.data import scaling
from bdlkit.data.timeseries import persistence_noise
from bdlkit.engine import replicas
from bdlkit.engine.checkpoint import latest_checkpoint, load_checkpoint
from bdlkit.engine.collect import DiskStore
from bdlkit.engine.result import Result
from bdlkit.engine.resume import open_newest
from bdlkit.engine.runlog import LOG_DIGEST, read_log
from bdlkit.engine.runner import Runner
from bdlkit.models import build_for_data, forecaster_for
from bdlkit.models.pretrained import load_weights
from bdlkit.problems import BayesianModel
from bdlkit.problems.likelihoods import Bernoulli, Gaussian, cat_predictives
from bdlkit.problems.priors import IsotropicGaussian
from bdlkit.problems.select import parameter_selection, select_parameters
from bdlkit.runs import kept_metrics, likelihood_choice, run_record
from bdlkit.runs import report as run_report
from bdlkit.runs.config import RunConfig, method_options, resolved_hyper
from bdlkit.runs.out_folder import check_out, prepare_out
from bdlkit.runs.run_record import changes_of
from bdlkit.runs.yaml_files import load_yaml, save_yaml

TASKS = ("classification", "regression", "forecasting")
CHECKPOINTS_PER_RUN = 10  # the default cadence of a run directory
MAX_OUTPUTS = 1_000_000  # a declared num_classes above this would not fit in memory


# ---------------------------------------------------------------------- building blocks
def load_dataset(cfg: RunConfig, *, new_run: bool = False) -> Any:
    """The data set of ``cfg`` on ``cfg.device``: classification, regression or forecasting
    windows (Targets are for the Python API). Its content digest is checked against the
    one ``cfg`` records (``data_sha256``; ``new_run``: given for a new run, which the
    refusal says: :func:`.run_record.check_data`) and kept in its ``meta``
    (:mod:`.run_record`)."""
    ds = data_module.load(cfg.data, root=cfg.data_root, **cfg.data_kwargs)
    task = getattr(ds, "task", None)
    if task not in TASKS:
        raise ValueError(
            f"bdlkit fit trains networks on classification, regression or forecasting data; "
            f"{cfg.data!r} is {task or type(ds).__name__}. Use the Python API (bdlkit.infer) "
            "for Targets"
        )
    digest = run_record.data_digest(cfg.data, ds)
    run_record.check_data(cfg, digest, new_run=new_run)
    ds = ds.to(cfg.device, getattr(torch, cfg.dtype))
    ds.meta[run_record.DIGEST] = digest
    return ds


def build_problem(cfg: RunConfig, ds: Any) -> BayesianModel:
    """Network (seeded by ``cfg.seed``), likelihood and prior for ``ds``: the likelihood
    ``cfg.likelihood`` names (:mod:`bdlkit.runs.likelihood_choice`; ``auto``: categorical
    for classes, a Gaussian with a learned σ for regression and one learned σ per channel
    for forecasts), the forward pass in ``cfg.precision``; ``cfg.bayesian`` says which
    weights are random."""
    classification = ds.task == "classification"
    targets = math.prod(ds.y_train.shape[1:]) or 1
    out = likelihood_choice.output_count(cfg.likelihood, ds.task,
                                         ds.num_classes if classification else None, targets)
    if out > MAX_OUTPUTS:
        raise InputError(f"{cfg.data}: {out} network outputs (num_classes or target size) "
                         f"would build an output layer of more than {MAX_OUTPUTS} x hidden "
                         "weights; bdlkit fit refuses more: relabel the classes to 0..K-1 "
                         "or declare the real num_classes in --data-kwargs")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        if ds.task == "forecasting":
            net = forecaster_for(cfg.model, ds, **cfg.model_kwargs)
        else:
            net = build_for_data(cfg.model, ds.input_shape, out, **cfg.model_kwargs)
    net = net.to(device=cfg.device, dtype=getattr(torch, cfg.dtype))
    prior: Any = cfg.prior_scale
    if cfg.pretrained is not None:  # fine-tuning: start there, centre the prior there
        weights = load_weights(net, cfg.pretrained)  # (a new head: mean 0, as BayesDLL)
        random = set(select_parameters(net, parameter_selection(cfg.bayesian)))
        prior = IsotropicGaussian(cfg.prior_scale, {k: v for k, v in weights.items()
                                                    if k in random})
    noise = forecast_noise(ds) if ds.task == "forecasting" else None
    return BayesianModel(
        net, likelihood_choice.build(cfg.likelihood, ds.task, noise), prior=prior,
        num_data=ds.num_train, temperature=cfg.temperature, kld=cfg.kld,
        bayesian=parameter_selection(cfg.bayesian), precision=cfg.precision,
    )


def forecast_noise(ds: Any) -> list[float]:
    """Each channel's persistence error on the training windows: where a forecast's
    learned σ per channel starts (``docs/koopa_derivations.md`` §3)."""
    return persistence_noise(ds.x_train, ds.y_train).tolist()


def forecast_likelihood(ds: Any) -> Gaussian:
    """A Gaussian with one learned σ per channel, starting at the channel's persistence error
    on the training windows (``docs/koopa_derivations.md`` §3)."""
    return likelihood_choice.build("gaussian", "forecasting", forecast_noise(ds))


def eval_split(ds: Any) -> tuple[Tensor, Tensor]:
    """Held-out data for evaluation during training: validation if any, else test."""
    if getattr(ds, "x_val", None) is not None and len(ds.x_val):
        return ds.x_val, ds.y_val
    return ds.x_test, ds.y_test


def predictive_metrics(pred: Any, y: Tensor, ds: Any) -> dict[str, float]:
    """Test metrics of a predictive: class probabilities or a GaussianPredictive."""
    if ds.task == "classification":
        return metrics.classification_metrics(pred, y)
    return metrics.regression_metrics(pred, y, y_scale=evaluation.target_scale(ds))


def point_eval_fn(problem: BayesianModel, ds: Any, chunk: int = 2048):
    """``params -> metrics`` of the single network ``params`` on the held-out split."""
    x, y = eval_split(ds)
    # class probabilities (n, K): Bernoulli's predictive is p(y = 1) alone, so its two
    # columns come from log_predictive; categorical keeps the softmax (a resumed run logs the
    # same bits as before); regression the Gaussian predictive
    bernoulli = isinstance(problem.likelihood, Bernoulli)
    one = ((lambda p, xs: problem.log_predictive(p, xs).exp()) if bernoulli
           else problem.predictive)

    @torch.no_grad()
    def point_metrics(params: Any) -> dict[str, float]:
        pred = cat_predictives([one(params, x[i : i + chunk]) for i in range(0, len(x), chunk)])
        return {k: v for k, v in predictive_metrics(pred, y, ds).items() if k in ("accuracy",
                                                                             "nll", "rmse")}

    return point_metrics


def build_runner(cfg: RunConfig, run_dir: Path, progress: bool = False, ds: Any = None,
                 callbacks: list[Any] | None = None, topology: Topology | None = SINGLE):
    """Data, problem, algorithm and Runner of ``cfg``, built the same way for a fresh run,
    a resume and ``evaluate``: the runner binds the run length, builds a sampler's store
    under ``run_dir/samples`` (written on its first draw) and checkpoints every 10 % of the
    run unless ``checkpoint_every`` says otherwise. ``ds``: the data set of ``cfg``, when
    already loaded; ``callbacks``: the runner's (not part of the run's configuration);
    ``topology``: this process's place in a multi-process run (its chain's ranks must
    number ``cfg.data_parallel``), or None to read a finished run back in one process (its
    whole minibatch: ``data_parallel × batch_size`` rows), which pins no
    :data:`~.run_record.RESUME_ONLY` field. Nothing is written here."""
    batch_size, stepping = cfg.batch_size, topology is not None
    if topology is None:
        topology, batch_size = SINGLE, cfg.batch_size * cfg.data_parallel
    elif topology.data_size != cfg.data_parallel:
        raise InputError(f"{run_dir}: the run has {cfg.data_parallel} data-parallel rank(s) per "
                         f"chain and this launch {topology.data_size}: launch it with "
                         f"torchrun --nproc-per-node {cfg.data_parallel * cfg.chain_groups}")
    ds = load_dataset(cfg) if ds is None else ds
    problem = build_problem(cfg, ds)
    algorithm = get_method(cfg.method).build(problem, **run_hyper(cfg))
    runner = Runner(
        algorithm, ds, steps=cfg.steps, epochs=cfg.epochs, seed=cfg.seed,
        batch_size=batch_size, burnin=cfg.burnin, thin=cfg.thin,
        max_samples=cfg.max_samples, run_dir=run_dir, log_every=cfg.log_every,
        eval_fn=point_eval_fn(problem, ds) if cfg.eval_every else None,
        eval_every=cfg.eval_every, checkpoint_every=cfg.checkpoint_every,
        checkpoint_seconds=60.0 * cfg.checkpoint_minutes,
        checkpoints_per_run=CHECKPOINTS_PER_RUN, progress=progress, callbacks=callbacks,
        compile=cfg.compile, topology=topology,
        pinned=run_record.pinned(cfg, ds, stepping=stepping),
    )
    return runner, problem, ds, runner.total


def run_hyper(cfg: RunConfig) -> dict[str, Any]:
    """The method options of ``cfg``: its own, and those its zoo model sets that it leaves
    unset (:func:`bdlkit.models.method_options`: Koopa's smaller VI step sizes)."""
    key = cfg.method
    if cfg.method == "score_vi":  # score_vi's step sizes are its solver's
        key = f"score_vi/{cfg.hyper.get('solver', method_options('score_vi')['solver'].default)}"
    return {**models.method_options(cfg.model, key, cfg.hyper), **cfg.hyper}


def resolved(cfg: RunConfig, runner: Runner) -> RunConfig:
    """``cfg`` with every run-dependent default filled in (what ``config.yaml`` records)."""
    values = cfg.to_dict()
    values["hyper"] = resolved_hyper(cfg.method, run_hyper(cfg), runner.problem)
    bound, declared = runner.algorithm.hyperparameters(), method_options(cfg.method)
    for name, value in values["hyper"].items():  # defaults fixed by the run length
        derived = bound.get(name)  # (one outside the range of float values, from extreme
        # options, stays unset: config.yaml must read back, and a resume derives it again)
        if value is None and isinstance(derived, (int, float, str)) and not (
                name in declared and declared[name].range_problem(derived)):
            values["hyper"][name] = derived
    values["checkpoint_every"] = runner.checkpoint_every
    if cfg.pretrained is not None:  # resume and evaluate from any working directory
        values["pretrained"] = str(Path(cfg.pretrained).resolve())
    values["likelihood"] = likelihood_choice.name_of(runner.problem.likelihood)
    values["batch_size"] = runner.batch_size  # all rows for full-batch samplers (hmc, nuts)
    values.update(run_record.inputs(runner.data))  # the data's digest, the thread count
    if runner.store is not None:
        store = runner.store
        values.update(burnin=store.burnin, thin=store.thin, max_samples=store.max_samples)
    return RunConfig(**values)


@dataclass(frozen=True)
class RunOutput:
    """What ``fit``/``resume`` return: test metrics, the result and the time split."""

    metrics: dict[str, Any]
    result: Result
    run_dir: Path
    train_seconds: float  # the runner's wall time, summed over resumes
    eval_seconds: float  # BMA predictive, metrics, plots and report


def fit(cfg: RunConfig, out: str | os.PathLike, *, overwrite: bool = False,
        progress: bool = False, callbacks: list[Any] | None = None,
        topology: Topology = SINGLE) -> RunOutput | None:
    """Run ``cfg`` into the new run directory ``out`` and evaluate it; returns the metrics.
    The folder is locked for the whole run (:mod:`bdlkit.core.lock`). ``callbacks``: the
    runner's (:mod:`bdlkit.engine.callbacks`). On a data-parallel rank that is not its
    chain's writer (``topology``) the run is made and nothing written: returns None.
    torch runs at ``cfg.threads`` threads (default: as it is) until it returns."""
    with run_record.using_threads(cfg.threads):
        return _fit(cfg, out, overwrite, progress, callbacks, topology)


def _fit(cfg: RunConfig, out: str | os.PathLike, overwrite: bool, progress: bool,
         callbacks: list[Any] | None, topology: Topology) -> RunOutput | None:
    if not topology.writer:
        replicas.wait_for_writer(topology, cfg.device)  # the folder is ready
        build_runner(cfg, Path(out), topology=topology)[0].fit(config={"hyper": cfg.hyper})
        return None
    with _telling_replicas(topology, cfg.device) as ready:
        check_out(out, overwrite)  # refuse before loading any data
        runner, problem, ds, total = build_runner(  # validates first
            cfg, Path(out), progress, load_dataset(cfg, new_run=True), callbacks, topology)
        cfg = resolved(cfg, runner)  # the whole configuration is valid before any deletion
        check_out(out, overwrite)
        with run_lock(out, f"fitting {cfg.method}"):
            run_dir = prepare_out(out, overwrite)
            save_yaml(run_dir / "config.yaml", cfg.to_dict())
            ready()
            result = runner.fit(config={"hyper": cfg.hyper})
            return _finish(result, cfg, ds, run_dir)


def resume(run_dir: str | os.PathLike, *, progress: bool = False,
           step_size: tuple[str, float] | None = None, threads: int | None = None,
           accept: tuple[str, ...] = (), callbacks: list[Any] | None = None,
           topology: Topology = SINGLE) -> RunOutput | None:
    """Continue the run in ``run_dir`` from its newest intact checkpoint; returns the
    metrics. ``step_size=(option, value)`` gives the method's step size option (``lr``,
    ``step_size`` or ``eps``: what the NaN stop names) a new value from here on, e.g. a
    smaller one after a NaN stop; ``config.yaml`` is rewritten with it and the change
    recorded under ``changes`` (step, option, old and new value). The run continues at
    the thread count it recorded; ``threads`` asks for another, which ``accept`` must
    name, as it must every other pinned field edited in config.yaml
    (:func:`.run_record.reconciled`: a difference not accepted is refused); an accepted
    change is recorded under ``changes`` too. ``callbacks``: the runner's, which need not
    be those of the interrupted run. On a rank that is not its chain's writer
    (``topology``) the run continues from the configuration the writer wrote, and nothing
    is written: returns None."""
    run_dir = Path(run_dir)
    device = read_config(run_dir).device  # not a run directory: refused before any write
    if not topology.writer:
        replicas.wait_for_writer(topology, device)  # config.yaml holds any step-size change
        cfg = read_config(run_dir)
        with run_record.using_threads(cfg.threads):
            build_runner(cfg, run_dir, topology=topology)[0].fit(
                resume=True, config={"hyper": cfg.hyper}, changed=changes_of(cfg))
        return None
    with _telling_replicas(topology, device) as ready, run_lock(run_dir, "resuming"):
        remove_stale_temps(run_dir)
        recorded = read_config(run_dir)
        cfg = run_record.reconciled(recorded, run_dir, run_record.newest_meta(run_dir),
                                    threads=threads, accept=accept)
        with run_record.using_threads(cfg.threads):
            return _resume(cfg, recorded, run_dir, progress, step_size, callbacks, topology,
                           ready)


def _resume(cfg: RunConfig, recorded: RunConfig, run_dir: Path, progress: bool,
            step_size: tuple[str, float] | None, callbacks: list[Any] | None,
            topology: Topology, ready: Callable[[], None]) -> RunOutput:
    """:func:`resume` on the writer, holding the lock, at ``cfg``'s thread count."""
    runner, problem, ds, total = build_runner(cfg, run_dir, progress, callbacks=callbacks,
                                              topology=topology)
    cfg = run_record.with_inputs(cfg, ds)  # an older run's first resume records them
    if cfg != recorded:
        save_yaml(run_dir / "config.yaml", cfg.to_dict())  # before any new checkpoint
    if step_size is not None:
        path, ckpt = open_newest(run_dir / "checkpoints")
        runner.check_checkpoint(ckpt.meta, path, changes_of(cfg))
        cfg = run_record.with_step_size(cfg, runner.algorithm.step_size_param, *step_size,
                                        step=ckpt.step)
        if ckpt.step >= total:
            raise InputError(f"{run_dir} has finished ({ckpt.step} of {total} steps): "
                             "there is nothing to continue with a new step size; start "
                             "a new run with --out")
        save_yaml(run_dir / "config.yaml", cfg.to_dict())  # before any new checkpoint
        runner, problem, ds, total = build_runner(cfg, run_dir, progress, ds, callbacks,
                                                  topology)
    ready()
    result = runner.fit(resume=True, config={"hyper": cfg.hyper}, changed=changes_of(cfg))
    return _finish(result, cfg, ds, run_dir)


@contextlib.contextmanager
def _telling_replicas(topology: Topology, device: str) -> Iterator[Callable[[], None]]:
    """The writer's preparation of the folder: ``ready()`` tells its data-parallel replicas
    to start; a refusal before it tells them to stop (:func:`replicas.writer_ready`)."""
    told = []

    def ready() -> None:
        replicas.writer_ready(topology, device, True)
        told.append(True)

    try:
        yield ready
    except BaseException:
        if not told:
            replicas.writer_ready(topology, device, False)
        raise


def _finish(result: Result, cfg: RunConfig, ds: Any, run_dir: Path) -> RunOutput:
    start = time.perf_counter()
    values = evaluate_result(result, cfg, ds, run_dir)
    return RunOutput(values, result, run_dir, float(result.config["wall_time_s"]),
                     time.perf_counter() - start)


def read_config(run_dir: Path) -> RunConfig:
    if not (run_dir / "config.yaml").exists():
        raise FileNotFoundError(f"{run_dir} is not a bdlkit run directory (no config.yaml)")
    stored = scaling.as_stored(load_yaml(run_dir / "config.yaml"))  # older runs: unscaled
    return RunConfig.from_dict(stored, f"{run_dir}/config.yaml")


def load_run(run_dir: str | os.PathLike) -> tuple[Result, RunConfig, Any]:
    """Rebuild the final :class:`Result` of a finished run from its directory, checking the
    final checkpoint's checksum, that ``config.yaml`` still describes the run that wrote
    it, and that the sample manifest is the checkpoint's store record."""
    run_dir = Path(run_dir)
    cfg = read_config(run_dir)
    runner, problem, ds, total = build_runner(cfg, run_dir, topology=None)
    path = latest_checkpoint(run_dir / "checkpoints")
    if path is None:
        raise FileNotFoundError(f"{run_dir} has no checkpoint: the run never started")
    try:
        ckpt = load_checkpoint(path)
    except CorruptFileError as err:
        raise CorruptFileError(
            f"{err}. `bdlkit fit --resume {run_dir}` sets it aside and recomputes the end of "
            "the run from the previous checkpoint (bit-exactly); then evaluate again") from None
    if ckpt.step != total:
        raise ValueError(
            f"{run_dir} stopped at step {ckpt.step} of {total}; finish it first with "
            f"`bdlkit fit --resume {run_dir}`"
        )
    run_record.check_against(cfg, ckpt.meta, run_dir)  # naming the field and the fix
    runner.check_checkpoint(ckpt.meta, path, changes_of(cfg), fix=f"{run_dir}/config.yaml "
                            "was edited after the run: restore its original values")
    state = state_from_tensors(runner.initial_state(), ckpt.state)
    store = None
    if runner.algorithm.collects_draws:
        store = DiskStore.open(run_dir / "samples", f"`bdlkit fit --resume {run_dir}` rewrites "
                               "it from the final checkpoint")
        store.check_record(ckpt.meta.get("store"), str(path))
    history = read_log(run_dir / "log.jsonl", ckpt.step, ckpt.meta.get(LOG_DIGEST))
    config = {"method": cfg.method, "kind": runner.algorithm.kind, "seed": cfg.seed,
              "steps": total, "hyper": cfg.hyper, "wall_time_s": ckpt.meta.get("elapsed_s")}
    return Result(problem, runner.algorithm, state, store, history, config), cfg, ds


def reevaluate(run_dir: str | os.PathLike, *, ood: str | None = None,
             reference: str | os.PathLike | None = None,
             corruptions: bool = False, num_draws: int | None = None,
             max_test: int | None = None, progress: Any = None) -> dict[str, Any]:
    """Recompute ``metrics.json`` and ``report.md`` of a finished run, optionally with OOD
    data, reference probabilities and corruptions (:func:`bdlkit.evaluation.evaluate`),
    holding the folder's lock; ``num_draws``, ``max_test`` and ``progress`` as for
    :func:`evaluate_result`. torch runs at the run's recorded thread count, so that the
    metrics are those the run wrote."""
    threads = read_config(Path(run_dir)).threads  # not a run directory: refused first
    with run_record.using_threads(threads), run_lock(run_dir, "evaluating"):
        remove_stale_temps(run_dir)
        result, cfg, ds = load_run(run_dir)
        return evaluate_result(result, cfg, ds, Path(run_dir), ood=ood, reference=reference,
                               corruptions=corruptions, num_draws=num_draws,
                               max_test=max_test, progress=progress)


def evaluate_result(result: Result, cfg: RunConfig, ds: Any, run_dir: Path, *,
                    ood: str | None = None, reference: str | os.PathLike | None = None,
                    corruptions: bool = False, num_draws: int | None = None,
                    max_test: int | None = None, progress: Any = None) -> dict[str, Any]:
    """Everything that applies to ``result``; writes ``metrics.json``, plots and ``report.md``.

    Args:
        num_draws: average over this many draws (evenly spaced kept draws of a sampler, VI
            draws instead of ``cfg.eval_samples``, an ensemble's first members); default all.
        max_test: only the first ``max_test`` test rows (of ``ds`` and of the OOD data).
        progress: a :class:`~bdlkit.evaluation.plan.Progress` (the command line's bar).
    """
    ood_ds = data_module.load(ood, root=cfg.data_root) if ood else None
    ref = load_reference_for(reference, cfg, ds) if reference else None
    ds = evaluation.first_test_rows(ds, max_test)  # the report plots the rows evaluated
    ev = evaluation.evaluate(result, ds, num_samples=num_draws or cfg.eval_samples,
                             max_draws=num_draws, ood=ood_ds, reference=ref,
                             corruptions=corruptions, max_test=max_test, progress=progress)
    ev = kept_metrics.reevaluated(run_dir, ev, result, ds)  # keeps --ood etc. not asked again
    save_json(run_dir / "metrics.json", ev.metrics)
    run_report.write(run_dir, cfg, result, ev, ds)
    return ev.metrics


def load_reference_for(path: str | os.PathLike, cfg: RunConfig, ds: Any) -> Tensor:
    """Reference probabilities from a ``bdlkit reference`` folder (checked against the run's
    data and test split) or from a ``.npy``/``.npz``/``.safetensors`` file."""
    if Path(path).is_dir():
        from bdlkit.runs import reference

        ref = reference.load(path)
        reference.check_matches(ref, cfg.data, ds)
        return ref.probs
    return metrics.load_reference(path)


def read_metrics(run_dir: str | os.PathLike) -> dict[str, Any]:
    return load_json(Path(run_dir) / "metrics.json")
