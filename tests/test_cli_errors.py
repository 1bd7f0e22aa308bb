"""Every bad input to ``bdlkit`` ends in one line, ``bdlkit: error: ...``, exit status 2,
naming the option or file (issue 19, item 5); a bug is a traceback and a line saying so.

Each case runs ``bdlkit.cli.main`` in-process. Only the log.jsonl cases need a run that
has trained (2 steps of an MLP on digits, built once per module).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from bdlkit import cli
from bdlkit.cli import main
from bdlkit.core.errors import InputError
from bdlkit.core.serialization import save_tensors
from bdlkit.l2e.kinetic import META_KEYS, init_meta_params

QUICK = ["--steps", "2", "--no-progress"]
BINARY = b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary"


def _run(argv: list[str]) -> int:
    """``main(argv)``'s exit status, argparse's ``SystemExit`` included."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return int(exit_.code)


def _fit(tmp: Path, *extra: str, method: str = "sgld") -> list[str]:
    return ["fit", "--method", method, "--out", str(tmp / "out"), *QUICK, *extra]


def _config_file(text: str | bytes) -> Callable[[Path], list[str]]:
    """A ``fit --config FILE`` command line whose FILE holds ``text``."""
    def argv(tmp: Path) -> list[str]:
        path = tmp / "exp.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return ["fit", "--config", str(path), "--out", str(tmp / "out"), "--no-progress"]
    return argv


def _run_dir(config: str | bytes, *command: str) -> Callable[[Path], list[str]]:
    """``bdlkit <command> DIR`` on a run directory (marker and config.yaml, no checkpoint)."""
    def argv(tmp: Path) -> list[str]:
        run = tmp / "run"
        run.mkdir()
        (run / ".bdlkit-run").write_text("")
        (run / "config.yaml").write_bytes(config if isinstance(config, bytes) else config.encode())
        return [*command, str(run)] + (["--no-progress"] if command[0] == "fit" else [])
    return argv


def _l2e_file(constants: str) -> Callable[[Path], list[str]]:
    """``fit --method l2e --meta-params FILE`` whose ``constants`` metadata is ``constants``."""
    def argv(tmp: Path) -> list[str]:
        meta = init_meta_params(torch.Generator().manual_seed(0))
        path = tmp / "meta.safetensors"
        save_tensors(path, {k: meta[k] for k in META_KEYS},
                     metadata={"format": "bdlkit-l2e-meta-params/1", "constants": constants})
        return _fit(tmp, "--meta-params", str(path), method="l2e")
    return argv


def _args(*extra: str, method: str = "sgld") -> Callable[[Path], list[str]]:
    return lambda tmp: _fit(tmp, *extra, method=method)


CASES = {
    # F8: devices
    "device-meta": (_args("--device", "meta"), ["--device", "'meta'", "cpu"]),
    "device-unknown": (_args("--device", "cpux"), ["--device", "'cpux'"]),
    "device-other-backend": (_args("--device", "xpu"), ["--device", "'xpu'"]),
    # F9a: an L2E meta-parameter file whose constants are a JSON list, or not JSON
    "l2e-constants-list": (_l2e_file("[1, 2]"), ["meta.safetensors", "JSON list"]),
    "l2e-constants-not-json": (_l2e_file("{oops"), ["meta.safetensors"]),
    "l2e-constants-bad-value": (_l2e_file('{"friction": "high"}'), ["meta.safetensors"]),
    # F9b: config files that are binary, not a mapping or have wrong-typed values
    "run-config-binary-resume": (_run_dir(BINARY, "fit", "--resume"),
                                 ["config.yaml", "UTF-8", "--overwrite"]),
    "run-config-binary-evaluate": (_run_dir(BINARY, "evaluate"), ["config.yaml", "UTF-8"]),
    "run-config-list": (_run_dir("- method\n- sgld\n", "fit", "--resume"),
                        ["config.yaml", "mapping"]),
    "run-config-steps-list": (_run_dir("method: sgld\nsteps: [1]\n", "fit", "--resume"),
                              ["config.yaml", "'steps'"]),
    "run-config-model-kwargs-int": (_run_dir("method: sgld\nmodel_kwargs: 3\n", "evaluate"),
                                    ["config.yaml", "'model_kwargs'"]),
    "config-binary": (_config_file(BINARY), ["exp.yaml", "UTF-8"]),
    "config-not-yaml": (_config_file("method: sgld\nhyper: {lr: [1, 2\n"),
                        ["exp.yaml", "not valid YAML"]),
    "config-not-mapping": (_config_file("just text\n"), ["exp.yaml", "mapping"]),
    "config-steps-list": (_config_file("method: sgld\nsteps: [1]\n"), ["exp.yaml", "'steps'"]),
    "config-model-kwargs-int": (_config_file("method: sgld\nmodel_kwargs: 3\n"),
                                ["exp.yaml", "'model_kwargs'"]),
    "config-hyper-list": (_config_file("method: sgld\nhyper: [1]\n"), ["exp.yaml", "'hyper'"]),
    "config-seed-1e23": (_config_file("method: sgld\nseed: 1e23\n"), ["exp.yaml", "'seed'"]),
    "config-seed-huge-float": (_config_file("method: sgld\nseed: 1.0e+23\n"),
                               ["exp.yaml", "'seed'"]),
    "config-steps-1e23": (_config_file("method: sgld\nsteps: 1e23\n"), ["exp.yaml", "'steps'"]),
    "config-steps-2.5": (_config_file("method: sgld\nsteps: 2.5\n"), ["exp.yaml", "'steps'"]),
    "config-steps-huge-int": (_config_file(f"method: sgld\nsteps: {10**30}\n"),
                              ["exp.yaml", "'steps'"]),
    "config-lr-nan": (_config_file("method: sgld\nsteps: 2\nhyper: {lr: .nan}\n"),
                      ["exp.yaml", "'hyper.lr'", "finite"]),
    "config-temperature-inf": (_config_file("method: sgld\ntemperature: .inf\n"),
                               ["exp.yaml", "'temperature'"]),
    # F9c: model options the model cannot be built with
    "model-kwargs-hidden-str": (_args("--model-kwargs", '{"hidden": "abc"}'),
                                ["--model-kwargs", "'mlp'", "hidden='abc'"]),
    "model-kwargs-unknown": (_args("--model-kwargs", '{"hiden": [3]}'),
                             ["--model-kwargs", "'hiden'", "did you mean 'hidden'"]),
    "model-kwargs-not-object": (_args("--model-kwargs", "[1]"), ["--model-kwargs"]),
    "model-kwargs-not-json": (_args("--model-kwargs", "{bad"), ["--model-kwargs", "JSON"]),
    # F9d: integers
    "seed-1e23": (_args("--seed", "1e23"), ["--seed", "integer"]),
    "seed-huge": (_args("--seed", str(10**23)), ["--seed", "2**63 - 1"]),
    "seed-negative": (_args("--seed", "-1"), ["--seed", ">= 0"]),
    "batch-size-negative": (_args("--batch-size", "-1"), ["--batch-size", ">= 1"]),
    "steps-2.5": (lambda tmp: ["fit", "--method", "sgld", "--steps", "2.5", "--out",
                               str(tmp / "out")], ["--steps", "integer"]),
    # F9e: non-finite numbers
    "temperature-inf": (_args("--temperature", "inf"), ["--temperature", "finite"]),
    "prior-scale-nan": (_args("--prior-scale", "nan"), ["--prior-scale", "finite"]),
    "checkpoint-minutes-inf": (_args("--checkpoint-minutes", "inf"),
                               ["--checkpoint-minutes", "finite"]),
    "lr-nan": (_args("--lr", "nan"), ["--lr", "finite"]),
    "lr-inf": (_args("--lr", "inf"), ["--lr", "finite"]),
    "lr-abc": (_args("--lr", "abc"), ["--lr", "'abc'"]),
    "members-2.5": (_args("--members", "2.5", method="ensemble"), ["--members", "integer"]),
    # MC dropout on a network it cannot drop units of, a rate outside [0, 1), a UCI name
    "mc-dropout-no-layers": (_args("--data", "uci/yacht", method="mc_dropout"),
                             ["no dropout layers", "--rate 0.05", "dropout=0.05"]),
    "mc-dropout-rate-0": (_args("--data", "uci/yacht", "--rate", "0", method="mc_dropout"),
                          ["no dropout layers", "rate is 0.0"]),
    "mc-dropout-rate-1": (_args("--data", "uci/yacht", "--rate", "1", method="mc_dropout"),
                          ["rate must be a number in [0, 1)", "try rate=0.05"]),
    "uci-unknown-set": (_args("--data", "uci/yaht"), ["'yaht'", "yacht (yacht)"]),
    # cases that were one line already
    "unknown-method": (lambda tmp: ["fit", "--method", "sgdl", "--out", str(tmp / "o")],
                       ["'sgdl'"]),
    "missing-data-file": (_args("--data", "no_such_file.npz"), ["no_such_file.npz"]),
    "resume-without-config": (lambda tmp: ["fit", "--resume", str(tmp), "--no-progress"],
                              ["config.yaml"]),
    "resume-with-options": (lambda tmp: ["fit", "--resume", str(tmp), "--seed", "1"],
                            ["--resume"]),
    "missing-config-file": (lambda tmp: ["fit", "--config", str(tmp / "nope.yaml"), "--out",
                                         str(tmp / "o")], ["nope.yaml"]),
    "reference-nan-prior": (lambda tmp: ["reference", "hmc", "--prior-scale", "nan", "--out",
                                         str(tmp / "ref")], ["--prior-scale"]),
}


def _assert_one_error_line(rc: int, err: str, needles: list[str]) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, err
    assert "Traceback" not in err
    assert len(lines) == 1, err
    assert lines[0].startswith("bdlkit: error:"), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_naming_the_option_or_file(case, tmp_path, capsys):
    build, needles = CASES[case]
    rc = _run(build(tmp_path))
    _assert_one_error_line(rc, capsys.readouterr().err, needles)
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_cuda_index_beyond_the_visible_gpus(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    rc = _run(_fit(tmp_path, "--device", "cuda:5"))
    _assert_one_error_line(rc, capsys.readouterr().err, ["--device", "'cuda:5'", "only 1 GPU"])


def test_cuda_without_a_gpu(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc = _run(_fit(tmp_path, "--device", "cuda:0"))
    _assert_one_error_line(rc, capsys.readouterr().err, ["--device", "no CUDA GPU"])


# ---------------------------------------------------------------------- a trained run
@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("trained") / "run"
    assert main(["fit", "--method", "sgld", "--out", str(out), "--steps", "2",
                 "--log-every", "1", "--no-progress"]) == 0
    return out


@pytest.mark.parametrize("content", [BINARY, b'{"step": 1}\n[1, 2]\n', b'{"step": "x"}\n'],
                         ids=["binary", "json-list-line", "string-step"])
def test_corrupt_log_is_one_line_naming_it(trained_run, tmp_path, capsys, content):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    (run / "log.jsonl").write_bytes(content)
    rc = _run(["evaluate", str(run)])
    _assert_one_error_line(rc, capsys.readouterr().err, ["log.jsonl", "--overwrite"])


# ---------------------------------------------------------------------- bugs
@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyError("k"), AttributeError("a")])
def test_an_internal_error_is_a_traceback_and_a_line_saying_so(error, capsys, monkeypatch):
    def broken(args):
        raise error

    monkeypatch.setattr(cli, "cmd_evaluate", broken)
    rc = main(["evaluate", "somewhere"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "Traceback" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"bdlkit: internal error ({type(error).__name__})")
    assert "report" in last and "BDLKIT_DEBUG" in last


def test_an_input_error_raised_anywhere_is_one_line(capsys, monkeypatch):
    def refuse(args):
        raise InputError("the file x.npz is\nbad; fix it")

    monkeypatch.setattr(cli, "cmd_evaluate", refuse)
    rc = main(["evaluate", "somewhere"])
    line = _assert_one_error_line(rc, capsys.readouterr().err, ["x.npz"])
    assert line == "bdlkit: error: the file x.npz is bad; fix it"


def test_debug_re_raises(tmp_path, monkeypatch):
    monkeypatch.setenv("BDLKIT_DEBUG", "1")
    with pytest.raises(InputError, match="--device"):
        main(_fit(tmp_path, "--device", "meta"))

