"""`slurm-marl train interference|marl` and `slurm-marl evaluate` through the CLI."""

import json

import pytest
from typer.testing import CliRunner

from slurm_marl.cli import app as main_app
from slurm_marl.sim.traces import write_generic
from slurm_marl.train.cli import app, evaluate
from train_helpers import TINY_CLUSTER, tiny_workload

runner = CliRunner()


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_samples):
    d = tmp_path_factory.mktemp("cli")
    with open(d / "samples.jsonl", "w") as fh:
        for s in tiny_samples:
            fh.write(json.dumps(s) + "\n")
    write_generic(d / "trace.csv", tiny_workload(120, 11, mean_gap_s=150.0))
    return d


def test_registered_in_the_main_cli():
    out = runner.invoke(main_app, ["--help"]).output
    assert "train" in out and "evaluate" in out


def test_train_interference_writes_model_and_reports_mae(files):
    result = runner.invoke(app, ["interference", "--samples", str(files / "samples.jsonl"),
                                 "--out", str(files / "im"), "--epochs", "8", "--min-steps", "0", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output[result.output.index("{"):])
    assert doc["val_mae"] < doc["baseline_val_mae"]
    assert (files / "im" / "interference.pt").is_file()
    table = runner.invoke(app, ["interference", "--samples", str(files / "samples.jsonl"),
                                "--out", str(files / "im2"), "--epochs", "2", "--min-steps", "0"])
    assert table.exit_code == 0 and "baseline_val_mae" in table.output


def test_train_interference_bad_samples(files):
    bad = files / "bad.jsonl"
    bad.write_text('{"speed": 0.9}\n{"speed": "fast"}\n')
    result = runner.invoke(app, ["interference", "--samples", str(bad), "--out",
                                 str(files / "x")])
    assert result.exit_code == 2
    assert "bad.jsonl:2: speed='fast' is not a number" in " ".join(result.output.split())


def test_train_interference_from_the_agents_store(files, tiny_samples, tmp_path):
    """`--from-store`: the speeds the daemon observed (speed_samples table) train the model,
    alone or together with simulator samples; an empty or missing store is a clear error."""
    from slurm_marl.daemon.store import Store

    store = Store(tmp_path / "state" / "state.sqlite")
    store.samples.add({**s, "source": "observed"} for s in tiny_samples)
    store.close()
    result = runner.invoke(app, ["interference", "--from-store", str(tmp_path / "state"),
                                 "--out", str(tmp_path / "im"), "--epochs", "2", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output[result.output.index("{"):])
    assert doc["train_samples"] + doc["val_samples"] == len(tiny_samples)
    assert doc["val_mae"] < doc["baseline_val_mae"]
    assert doc["samples_file"].startswith("store:")
    assert doc["steps"] >= 2000 and doc["epochs"] > 2  # a small set gets enough passes
    both = runner.invoke(app, ["interference", "--from-store", str(tmp_path / "state"),
                               "--samples", str(files / "samples.jsonl"),
                               "--out", str(tmp_path / "im2"), "--epochs", "1", "--min-steps", "0", "--json"])
    doc2 = json.loads(both.output[both.output.index("{"):])
    assert doc2["train_samples"] + doc2["val_samples"] == 2 * len(tiny_samples)
    Store(tmp_path / "empty.sqlite").close()
    empty = runner.invoke(app, ["interference", "--from-store", str(tmp_path / "empty.sqlite"),
                                "--out", str(tmp_path / "x")])
    assert empty.exit_code == 2 and "no observed speed samples" in " ".join(empty.output.split())
    missing = runner.invoke(app, ["interference", "--from-store", str(tmp_path / "nope"),
                                  "--out", str(tmp_path / "x")])
    assert missing.exit_code == 2 and "no state store" in " ".join(missing.output.split())
    neither = runner.invoke(app, ["interference", "--out", str(tmp_path / "x")])
    assert neither.exit_code == 2 and "--from-store" in " ".join(neither.output.split())


def test_least_interference_uses_a_trained_model_file(files, tmp_path):
    from slurm_marl.policy.place.least_interference import build
    from slurm_marl.policy.plugins import PluginError
    from slurm_marl.domain import Job

    runner.invoke(app, ["interference", "--samples", str(files / "samples.jsonl"),
                        "--out", str(tmp_path / "im"), "--epochs", "8", "--min-steps", "0"])
    lif = build({"model_path": str(tmp_path / "im" / "interference.pt")})
    job = Job(1, model_type="resnet50")
    alone = lif.estimator.predict_speed(job, {"span": ()})
    crowded = lif.estimator.predict_speed(job, {"group": ("vgg19",) * 3,
                                                "node": ("lm",) * 4})
    assert 0 < crowded < alone <= 1
    with pytest.raises(PluginError, match="does not exist"):
        build({"model_path": str(tmp_path / "none.pt")})


def test_train_marl_resume_and_evaluate(files):
    runner.invoke(app, ["interference", "--samples", str(files / "samples.jsonl"),
                        "--out", str(files / "im3"), "--epochs", "8", "--min-steps", "0"])
    common = ["marl", "--reward-model", str(files / "im3"), "--trace",
              str(files / "trace.csv"), "--window", "rows=0:80", "--cluster", TINY_CLUSTER,
              "--jobs-per-episode", "40", "--episodes-per-update", "1",
              "--out", str(files / "run"), "--json"]
    first = runner.invoke(app, common + ["--updates", "1"])
    assert first.exit_code == 0, first.output
    doc = json.loads(first.output[first.output.index("{"):])
    assert doc["updates"] == 1 and doc["env_steps"] > 0
    again = runner.invoke(app, common + ["--updates", "2", "--resume", "--eval-window",
                                         "rows=80:120", "--eval-every", "1"])
    assert again.exit_code == 0, again.output
    doc = json.loads(again.output[again.output.index("{"):])
    assert doc["updates"] == 2 and doc["best_eval_avg_jct_s"] > 0
    for name in ("policy.pt", "policy.json", "best.pt", "train_log.csv",
                 "training_curve.png"):
        assert (files / "run" / name).is_file()

    # the same first update in another process (--backend local, sweep.backend_mapper):
    # the same training (the summary but its wall time, the log row but its timings)
    other = runner.invoke(app, [a if a != str(files / "run") else str(files / "run_local")
                                for a in common] + ["--updates", "1", "--backend", "local"])
    assert other.exit_code == 0, other.output
    doc_local = json.loads(other.output[other.output.index("{"):])
    first_doc = json.loads(first.output[first.output.index("{"):])
    timing = ("wall_s", "update_s", "rollout_s", "learn_s", "out")

    def same(d: dict) -> dict:
        return {k: (same(v) if isinstance(v, dict) else v) for k, v in d.items()
                if k not in timing}
    assert same(doc_local) == same(first_doc) and doc_local["env_steps"] > 0
    bad = runner.invoke(app, common + ["--updates", "1", "--backend", "cloud"])
    assert bad.exit_code == 2 and "--backend must be one of" in bad.output

    ev_app = __import__("typer").Typer()
    ev_app.command()(evaluate)
    result = runner.invoke(ev_app, ["--checkpoint", str(files / "run" / "policy.pt"),
                                    "--trace", str(files / "trace.csv"), "--window",
                                    "rows=80:120", "--cluster", TINY_CLUSTER,
                                    "--baselines", "las-consolidate,las-skew", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output[result.output.index("{"):])
    names = [r["profile"] for r in doc["results"]]
    assert names == ["las-learned[run/policy]", "las-consolidate", "las-skew"]
    assert all(r["finished"] == doc["jobs"] for r in doc["results"])
    assert min(r["vs_best_heuristic"] for r in doc["results"][1:]) == 0.0


def test_evaluate_table_with_a_checkpoint_in_the_current_folder(files, monkeypatch, tmp_path,
                                                               tiny_interference):
    """A bare file name once made the profile "las-learned[/policy]", which the progress
    bar read as a rich closing tag and crashed on."""
    from slurm_marl.agent.checkpoint import LearnedCheckpoint, policy_config
    from slurm_marl.models.policy import PlacementPolicy
    (tmp_path / "run").mkdir()
    policy = PlacementPolicy(policy_config(tiny_interference, ("a", "b"), "multi"))
    LearnedCheckpoint(policy, tiny_interference).save(tmp_path / "run" / "policy.pt")
    monkeypatch.chdir(tmp_path / "run")
    ev_app = __import__("typer").Typer()
    ev_app.command()(evaluate)
    result = runner.invoke(ev_app, ["--checkpoint", "policy.pt", "--trace",
                                    str(files / "trace.csv"), "--window", "rows=80:100",
                                    "--cluster", TINY_CLUSTER, "--baselines",
                                    "las-consolidate"])
    assert result.exit_code == 0, result.output
    assert "las-learned[run/policy]" in result.output


def test_marl_errors_are_clear(files):
    result = runner.invoke(app, ["marl", "--reward-model", str(files / "nothing"),
                                 "--trace", str(files / "trace.csv"), "--window", "rows=0:10",
                                 "--out", str(files / "r2"), "--cluster", TINY_CLUSTER])
    assert result.exit_code == 2 and "does not exist" in " ".join(result.output.split())
    result = runner.invoke(app, ["marl", "--reward-model", str(files / "im3"), "--trace",
                                 str(files / "trace.csv"), "--window", "rows=0:10",
                                 "--out", str(files / "r2"), "--mode", "both"])
    assert result.exit_code == 2 and "--mode" in result.output
    base = ["marl", "--reward-model", str(files / "im3"), "--trace", str(files / "trace.csv"),
            "--window", "rows=0:10", "--out", str(files / "r2"), "--cluster", TINY_CLUSTER]
    result = runner.invoke(app, base + ["--updates", "2", "--imitate-updates", "2"])
    assert result.exit_code == 2 and "--imitate-updates (2) must be fewer" in result.output
    result = runner.invoke(app, base + ["--updates", "2", "--imitate-updates", "1",
                                        "--teacher", "no-such-profile"])
    assert result.exit_code == 2 and "--teacher" in result.output
