"""Seeded fault schedules for the Raft quorum (TESTING.md R15, R16 and the random soak).

Each scenario builds a ``RaftCluster`` from its seed, drives faults and proposals from
a forked ``Rng``, and ends by healing everything and waiting until every voter holds
the leader's whole log as committed. The invariants run after every event throughout;
a violation raises ``InvariantViolation``. The result counts what was checked, so a
test can assert that a run was not vacuous.
"""

from __future__ import annotations

from dataclasses import dataclass

from mq.core.rng import Rng
from mq.raft import RaftConfig
from mq.raft.states import Leader
from mq.sim.network import Delay, Drop, Duplicate, Reorder
from mq.sim.raft_cluster import RaftCluster
from mq.sim.scheduler import InvariantViolation

# Short timeouts let one seed see many elections in few events (the protocol does not
# care about the scale; the defaults are 1000/2000/500/1000).
FAST = RaftConfig(election_timeout_ms=150, fetch_timeout_ms=300, fetch_max_wait_ms=100,
                  request_timeout_ms=100)


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    seed: int
    applied: int  # entries applied across nodes, each checked against the others
    events: int
    highest_epoch: int
    virtual_ms: int
    longest_leader_wait_ms: int = 0


def converge(cluster: RaftCluster, *, within_ms: int = 30_000) -> None:
    """Heal, restart every node, commit one more entry and wait until all agree."""
    cluster.heal()
    cluster.network.clear_filters()
    for voter in cluster.voters:
        cluster.start(voter)

    def has_leader() -> bool:
        return cluster.leader() is not None

    if not cluster.run_until(has_leader, within_ms=within_ms) or not cluster.propose(b"final"):
        raise InvariantViolation(f"no leader {within_ms} ms after healing")

    def agreed() -> bool:
        leader = cluster.leader()
        return leader is not None and all(
            r.high_watermark == leader.log.end_offset for r in cluster.alive())

    if not cluster.run_until(agreed, within_ms=within_ms):
        state = [(r.node_id, r.role, r.epoch, r.high_watermark, r.log.end_offset)
                 for r in cluster.alive()]
        raise InvariantViolation(f"voters did not converge after healing: {state}")
    digests = {n.machine.digest for n in cluster.nodes.values() if n.machine is not None}
    if len(digests) != 1:
        raise InvariantViolation("voters applied the same offsets but hold different state")


def _result(cluster: RaftCluster, longest_wait_ms: int = 0) -> ScenarioResult:
    return ScenarioResult(cluster.seed, cluster.applied_count, cluster.scheduler.events_run,
                          max(r.epoch for r in cluster.alive()), cluster.now_ms, longest_wait_ms)


def elections_with_disconnects(seed: int, *, voters: int = 5, rounds: int = 6,
                               leader_within_ms: int = 5000) -> ScenarioResult:
    """R15: disconnect random sets of voters; ≤ 1 leader per epoch, a leader among a
    connected majority within ``leader_within_ms``, none while no majority connects."""
    rng = Rng(seed).fork("r15")
    cluster = RaftCluster(seed, voters=voters, leader_within_ms=leader_within_ms)
    cluster.network.add_filter(Delay(0, 5))
    for _ in range(rounds):
        cluster.heal()
        order = list(cluster.voters)
        rng.shuffle(order)
        for voter in order[:rng.randint(0, voters)]:
            cluster.isolate(voter)
        cluster.propose(b"r15")
        cluster.run_for(rng.randint(leader_within_ms // 2, 2 * leader_within_ms))
    converge(cluster)
    assert cluster.liveness is not None
    return _result(cluster, cluster.liveness.longest_wait_ms)


def figure8_unreliable(seed: int, *, iterations: int = 12) -> ScenarioResult:
    """R16, after MIT 6.824's Figure8Unreliable: five voters; every leader (stale ones
    too) takes proposals and is then often cut off within milliseconds, so entries
    reach only some voters before the next election; up to two voters are
    disconnected at a time; the network drops, duplicates, delays and holds back
    messages for up to 600 ms."""
    rng = Rng(seed).fork("r16")
    cluster = RaftCluster(seed, voters=5, config=FAST)
    for network_filter in (Delay(0, 10), Drop(0.1), Duplicate(0.02), Reorder(0.05, 600)):
        cluster.network.add_filter(network_filter)
    cut_off: list[int] = []
    count = 0
    for _ in range(iterations):
        for raft in cluster.alive():
            for _ in range(rng.randint(1, 3) if raft.is_leader else 0):
                count += 1
                cluster.propose_to(raft.node_id, b"%d" % count)
        cluster.run_for(rng.randint(0, 13) if rng.random() < 0.9 else rng.randint(0, 300))
        leader = cluster.leader()
        if leader is not None and leader.node_id not in cut_off and rng.random() < 0.6:
            cluster.isolate(leader.node_id)
            cut_off.append(leader.node_id)
        while len(cut_off) > 2 or (cut_off and rng.random() < 0.3):
            cluster.reconnect(cut_off.pop(rng.randint(0, len(cut_off) - 1)))
            for other in cut_off:
                cluster.isolate(other)
        cluster.run_until(lambda: _leader_outside(cluster, cut_off), within_ms=2000)
    converge(cluster)
    return _result(cluster)


def _leader_outside(cluster: RaftCluster, cut_off: list[int]) -> bool:
    return any(r.is_leader and r.node_id not in cut_off for r in cluster.alive())


def random_schedule(seed: int, *, voters: int = 5, steps: int = 25) -> ScenarioResult:
    """Everything at once: proposals, crashes that lose unflushed data, restarts,
    partitions, an unreliable network, and snapshots with log truncation."""
    rng = Rng(seed).fork("schedule")
    cluster = RaftCluster(seed, voters=voters, snapshot_every=rng.choice([0, 5, 16]))
    for network_filter in (Delay(0, 20), Drop(0.05), Duplicate(0.03), Reorder(0.05, 300)):
        cluster.network.add_filter(network_filter)
    count = 0
    for _ in range(steps):
        roll = rng.random()
        down = [v for v in cluster.voters if cluster.nodes[v].raft is None]
        up = [v for v in cluster.voters if cluster.nodes[v].raft is not None]
        if roll < 0.5:
            for _ in range(rng.randint(1, 4)):
                count += 1
                cluster.propose(b"%d" % count)
        elif roll < 0.65 and up:
            cluster.crash(rng.choice(up))
        elif roll < 0.8 and down:
            cluster.start(rng.choice(down))
        elif roll < 0.9:
            order = list(cluster.voters)
            rng.shuffle(order)
            cut = rng.randint(1, voters - 1)
            cluster.partition(tuple(order[:cut]), tuple(order[cut:]))
        else:
            cluster.heal()
        cluster.run_for(rng.randint(10, 1500))
    converge(cluster)
    return _result(cluster)


def scripted_figure8(seed: int) -> ScenarioResult:
    """Raft's figure 8 steered by partitions (timings from the seed). With fetch
    responses of one entry, a leader's own-epoch entry does not travel with the older
    entries it re-replicates, so the leader can see an older entry on a majority while
    its own entry is on no one else yet. Counting that as committed is the bug §5.4.2
    forbids: a leader elected next, with a newer last epoch, overwrites the entry."""
    rng = Rng(seed).fork("figure8")
    config = RaftConfig(election_timeout_ms=150, fetch_timeout_ms=300, fetch_max_wait_ms=100,
                        request_timeout_ms=100, max_fetch_entries=1)
    cluster = RaftCluster(seed, voters=5, config=config)
    cluster.network.add_filter(Delay(1, 3))
    _await_leader(cluster, cluster.voters)
    first = cluster.leader()
    assert first is not None
    cluster.run_for(rng.randint(50, 100))  # everyone fetches the first leader's entry
    # 1. The leader writes X, but only one follower (a minority with it) gets it.
    partner = rng.choice([v for v in cluster.voters if v != first.node_id])
    pair = (first.node_id, partner)
    rest = tuple(v for v in cluster.voters if v not in pair)
    cluster.partition(pair, rest)
    cluster.propose_to(first.node_id, b"X")
    x_offset = first.log.end_offset - 1
    cluster.run_for(50)
    # 2. The others elect a leader whose own entry at X's offset reaches no one.
    second = _await_leader(cluster, rest)
    cluster.isolate(second)
    # 3. The pair and the two remaining voters elect a leader that has X.
    group = pair + tuple(v for v in rest if v != second)
    cluster.heal()  # ends the pair/rest partition; the second leader stays cut off
    cluster.isolate(second)
    third = _await_leader(cluster, pair)
    third_node = cluster.nodes[third].raft
    assert third_node is not None

    def x_on_majority_of_fetches() -> bool:
        state = third_node.quorum.state
        return isinstance(state, Leader) and sum(
            r.end_offset > x_offset for r in state.replicas.values()) >= 2

    cluster.run_until(x_on_majority_of_fetches, within_ms=2000)
    cluster.isolate(third)  # its answers, carrying its own-epoch entry, are lost
    # 4. The second leader returns; the voters without the third's entry elect it.
    third_epoch = third_node.epoch
    lacking = tuple(v for v in group if v != third
                    and cluster.nodes[v].log.last_epoch < third_epoch)
    cluster.heal()
    cluster.partition((second,) + lacking, tuple(v for v in cluster.voters
                                                 if v != second and v not in lacking))
    cluster.run_for(rng.randint(1000, 2000))
    converge(cluster)
    return _result(cluster)


def _await_leader(cluster: RaftCluster, among: tuple[int, ...], *, within_ms: int = 5000) -> int:
    """Run until one of ``among`` leads the newest epoch; return its id."""
    def current_leader() -> int | None:
        top = max(r.epoch for r in cluster.alive())
        for voter in among:
            raft = cluster.nodes[voter].raft
            if raft is not None and raft.is_leader and raft.epoch == top:
                return voter
        return None

    if not cluster.run_until(lambda: current_leader() is not None, within_ms=within_ms):
        raise InvariantViolation(f"no leader among {among} within {within_ms} ms")
    leader = current_leader()
    assert leader is not None
    return leader
