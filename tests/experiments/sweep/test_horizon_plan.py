"""`HorizonPlan.apply` writes a branch's blocked row, and removes a stale one, only over a blocked row or none: two
sweeps share a folder, and the other may have run the branch since this plan read the ledger."""

from __future__ import annotations

from experiments.records.ledger import Ledger
from experiments.sweep.branches import BLOCKED, HorizonPlan, is_blocked

BRANCH = "rope,horizon=16"


def blocked(seed: int) -> dict[str, str]:
    return {"cell": BRANCH, "seed": str(seed), "status": "failed", "phase": "branch",
            "error": f"{BLOCKED}rope,horizon=80~stable/seed{seed} failed: boom"}  # fmt: skip


def done(seed: int) -> dict[str, str]:
    return {"cell": BRANCH, "seed": str(seed), "status": "done", "phase": "branch", "error": ""}


def test_a_plan_never_writes_over_nor_removes_a_branch_another_sweep_ran(tmp_path):
    path = tmp_path / "results.csv"
    mine = Ledger(path, ("phase",))  # read before the other sweep wrote
    other = Ledger(path, ("phase",))
    other.put(done(0))
    other.put(done(1))
    HorizonPlan(blocked=[blocked(0)], cleared=[(BRANCH, 1)]).apply(mine)
    now = Ledger(path)
    assert now.get(BRANCH, 0)["status"] == "done" and now.get(BRANCH, 1)["status"] == "done"


def test_a_plan_writes_a_new_blocked_row_and_clears_a_stale_one(tmp_path):
    path = tmp_path / "results.csv"
    ledger = Ledger(path, ("phase",))
    ledger.put(blocked(1))
    HorizonPlan(blocked=[blocked(0)], cleared=[(BRANCH, 1)]).apply(Ledger(path, ("phase",)))
    now = Ledger(path)
    assert is_blocked(now.get(BRANCH, 0)) and now.get(BRANCH, 1) is None
