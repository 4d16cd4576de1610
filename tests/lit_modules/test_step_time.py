"""`StepTime`: a run's mean training-step time, warm-up steps left out, an accumulation's batches summed into the
step they make, validation outside (it runs after a batch's end), recorded as `run.json`'s `step_time_ms`."""

from __future__ import annotations

from types import SimpleNamespace

from lit_modules import step_time
from lit_modules.step_time import StepTime


def _train(callback: StepTime, monkeypatch, batches: list[tuple[float, bool]]) -> None:
    """Each batch takes its seconds; the optimizer steps at the batches marked True."""
    clock = [0.0]
    monkeypatch.setattr(step_time.time, "perf_counter", lambda: clock[0])
    trainer = SimpleNamespace(global_step=0)
    for i, (seconds, steps) in enumerate(batches):
        callback.on_train_batch_start(trainer, None, None, i)
        clock[0] += seconds
        trainer.global_step += steps
        callback.on_train_batch_end(trainer, None, None, None, i)
        clock[0] += 100.0  # validation or a checkpoint between batches: not timed


def test_the_mean_step_after_the_warm_up(monkeypatch):
    callback = StepTime(skip=2)
    _train(callback, monkeypatch, [(5.0, True), (3.0, True), (1.0, True), (2.0, True), (3.0, True)])
    assert (callback.steps, callback.seconds) == (3, 6.0)


def test_an_accumulated_step_is_its_batches_together(monkeypatch):
    callback = StepTime(skip=1)
    _train(callback, monkeypatch, [(1.0, False), (1.0, True), (0.5, False), (0.75, True), (0.5, False), (1.5, True)])
    assert (callback.steps, callback.seconds) == (2, 3.25)


def test_the_mean_is_marked_in_the_record_in_milliseconds(monkeypatch):
    marked = {}
    monkeypatch.setattr(step_time, "mark_run", lambda trainer, **fields: marked.update(fields))
    callback = StepTime(skip=0)
    callback.on_train_end(None, None)
    assert marked == {}  # no step timed (a run shorter than its warm-up): nothing recorded
    _train(callback, monkeypatch, [(0.02, True), (0.04, True)])
    callback.on_train_end(None, None)
    assert marked == {"step_time_ms": 30.0}
