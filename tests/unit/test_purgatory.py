import asyncio

from broker.purgatory import DelayedOperation, Purgatory


class WaitFor(DelayedOperation):
    def __init__(self, delay_ms, state, target):
        super().__init__(delay_ms)
        self.state, self.target, self.outcome = state, target, None

    def try_complete(self):
        return self.state["value"] >= self.target and self.force_complete()

    def on_expiration(self):
        self.outcome = "expired"

    def on_complete(self):
        self.outcome = self.outcome or "done"


async def test_completes_at_once_when_condition_holds():
    p = Purgatory("t")
    op = WaitFor(1000, {"value": 5}, 3)
    assert p.try_complete_else_watch(op, ["k"]) and op.outcome == "done" and p.watched() == 0


async def test_completes_when_key_checked_after_state_change():
    p, state = Purgatory("t"), {"value": 0}
    op = WaitFor(5000, state, 2)
    assert not p.try_complete_else_watch(op, ["a", "b"])
    state["value"] = 1
    assert p.check_and_complete("a") == 0
    state["value"] = 2
    assert p.check_and_complete("b") == 1 and op.outcome == "done"
    assert p.check_and_complete("a") == 0  # completed exactly once
    assert p.watched() == 0


async def test_expires_after_delay():
    p = Purgatory("t")
    op = WaitFor(20, {"value": 0}, 1)
    p.try_complete_else_watch(op, ["k"])
    await asyncio.sleep(0.08)
    assert op.outcome == "expired" and op.completed


async def test_shutdown_expires_everything():
    p = Purgatory("t")
    ops = [WaitFor(60_000, {"value": 0}, 1) for _ in range(3)]
    for op in ops:
        p.try_complete_else_watch(op, ["k"])
    p.shutdown()
    assert [op.outcome for op in ops] == ["expired"] * 3
