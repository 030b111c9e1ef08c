"""Network partitions and fencing on a three-broker region (TESTING.md R4, R5, R12,
R13, R14), through the link proxy: every broker reaches the others only via its own
proxied ``controller.quorum.voters``; clients use the real addresses, so a client
stays connected to an isolated broker.

Same setup and checks as ``test_region_processes`` (RF=3, ``min.insync.replicas=2``,
``acks=all``, seeds and counts printed). Where the catalogue needs "the followers
cannot replicate but the leader still reaches the quorum" (R5, R13), a link-level cut
cannot express it: Raft, replica fetches and controller requests share the same
links, and with every broker a voter, a leader cut from both followers is cut from
the quorum too (it is fenced, and its partitions move: that is R4). Those tests make
the followers' replicas of p0 unable to append with a scoped storage failpoint
(``storage.before_append@chaos-0=oserror(EIO)``) instead: the replication path is
partitioned, the quorum is not.
"""

from __future__ import annotations

import time

import pytest

from mq.core.errors import ErrorCode

from .regionkit import last_batch_epoch, probe_fetch, probe_list_offsets, region_run

R4_NEW_LEADER_MS = 10_000
R14_NEW_LEADER_MS = 15_000
R14_KINDS = ("one", "majority", "ring", "minority")
FOLLOWER_CANNOT_APPEND = "storage.before_append@chaos-0=oserror(EIO)"


# ---------------------------------------------------------------------- R4


def _r04(tmp_path, *, rounds: int, isolated_s: float) -> None:
    with region_run(tmp_path, "R4") as run:
        region, topic, proxy = run.region, run.topic, run.region.proxy
        assert proxy is not None
        workload = run.workload()
        run.hold(2.0)
        elections, isolated_acks, probes = [], [], 0
        for _ in range(rounds):
            before = region.partition_state(topic, 0)
            assert before is not None and before.leader >= 0, run.context
            old = before.leader
            majority = [n for n in region.ids if n != old]
            with run.nemesis.window(f"isolate n{old}"):
                at = run.history.now_ms()
                proxy.isolate(old)
                deadline = time.monotonic() + isolated_s
                while time.monotonic() < deadline:  # probe the isolated leader meanwhile
                    code = run.probe_produce(old, 0)
                    probes += 1
                    if code == 0:
                        isolated_acks.append(run.history.now_ms())
                    run.hold(0.5)
                proxy.heal_all()
            new_at = run.monitor.first(
                lambda s, maj=majority, e=before.leader_epoch: (b := s.best(0, nodes=maj)) is not None
                and b.leader in maj and b.leader_epoch > e, after_ms=at)
            elections.append(None if new_at is None else new_at - at)
            run.note(f"isolated n{old} (p0 leader, epoch {before.leader_epoch}) {isolated_s}s: "
                     f"new leader on the majority after {elections[-1]} ms; {probes} probes")
            region.wait_healthy(topic, run.partitions, timeout_s=30)
            run.hold(2.0)
        result = run.finish(workload)
        context = run.context
        assert not isolated_acks, f"{context}: the isolated leader acknowledged at {isolated_acks}"
        slow = [e for e in elections if e is None or e > R4_NEW_LEADER_MS]
        assert not slow, f"{context}: new leader on the majority after {elections} ms"
        assert not run.monitor.split_brain(), f"{context}: {run.monitor.split_brain()}"
        result.assert_ok()  # idempotent producers: no duplicates
        run.assert_no_tracebacks()


def test_r04_isolate_the_leader(tmp_path):
    """R4: cut the leader of p0 from its peers (its clients still reach it), twice."""
    _r04(tmp_path, rounds=2, isolated_s=10.0)


@pytest.mark.nightly
@pytest.mark.timeout(900)
def test_r04_isolate_the_leader_long(tmp_path):
    _r04(tmp_path, rounds=15, isolated_s=15.0)


# ---------------------------------------------------------------------- R5 / R13 shared


def _cut_replication_to(run, leader: int) -> list[int]:
    """Restart both followers of p0 (one at a time: the quorum survives) so that their
    replicas of p0 cannot append: the ISR of p0 shrinks to ``leader``."""
    followers = [n for n in run.region.ids if n != leader]
    for n in followers:
        node = run.region.node(n)
        node.terminate()
        node.failpoints = FOLLOWER_CANNOT_APPEND
        node.start()
    return followers


def _restore_followers(run, followers: list[int]) -> None:
    for n in followers:
        node = run.region.node(n)
        node.failpoints = ""
        if node.running:
            node.terminate()
    run.region.start_nodes(followers)


# ---------------------------------------------------------------------- R5


def test_r05_followers_partitioned_then_the_leader_dies(tmp_path):
    """R5: both followers of p0 stop replicating (ISR shrinks to the leader), the
    leader is killed, then everything heals: 0 acks while ISR < min, no unclean
    election, 0 lost."""
    with region_run(tmp_path, "R5") as run:
        region, topic = run.region, run.topic
        workload = run.workload()
        run.hold(2.0)
        leader = run.leader(0)
        with run.nemesis.window(f"partition replication of p0 from n{leader}"):
            followers = _cut_replication_to(run, leader)
            shrunk = region.wait_isr(topic, 0, {leader}, timeout_s=20)
            shrunk_ms = run.history.now_ms()
            run.note(f"p0 ISR shrank to {shrunk.isr} (leader n{leader}, epoch {shrunk.leader_epoch})")
            run.hold(3.0)
            probe = run.probe_produce(leader, 0)
            run.note(f"acks=all probe to n{leader} with ISR {shrunk.isr}: error {probe}")
            with run.nemesis.window(f"kill n{leader}"):
                region.kill(leader)
                killed_ms = run.history.now_ms()
                run.hold(6.0)  # twice broker.session.timeout.ms: time for an unclean election
                during = run.monitor.leaders(0, from_ms=killed_ms, nodes=followers)
                _restore_followers(run, followers)
                run.hold(2.0)
                region.start_node(leader)
            back_ms = run.history.now_ms()
        region.wait_healthy(topic, run.partitions, timeout_s=45)
        run.hold(2.0)
        result = run.finish(workload)
        acks_below_min = run.acks_between(0, shrunk_ms, back_ms, invoked_after_ms=shrunk_ms)
        unclean = [(t, ld, e, isr) for t, ld, e, isr in run.monitor.leaders(0, from_ms=shrunk_ms, to_ms=back_ms)
                   if ld >= 0 and ld != leader]
        run.note(f"acks on p0 while ISR < min: {len(acks_below_min)}; leaders seen after the kill "
                 f"{sorted({(ld, e) for _, ld, e, _ in during})}")
        context = run.context
        assert probe not in (0,), f"{context}: acks=all acknowledged with ISR {shrunk.isr}"
        # 19: refused before the append. 20: appended but not acknowledged — the
        # followers' logs matched the leader's end while nothing could be written, so
        # the leader took them back into the ISR for a moment, accepted the probe,
        # and then shrank the ISR again when they could not append it. Both refuse.
        assert probe in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, None), \
            f"{context}: probe answered {probe}, expected NOT_ENOUGH_REPLICAS(_AFTER_APPEND)"
        assert not acks_below_min, f"{context}: acked while ISR < min: {acks_below_min[:5]}"
        assert not unclean, f"{context}: unclean election: {unclean[:5]}"
        assert not run.monitor.split_brain(), f"{context}: {run.monitor.split_brain()}"
        result.assert_ok()  # idempotent producers: no duplicates
        run.assert_no_tracebacks()


# ---------------------------------------------------------------------- R12


def test_r12_zombie_leader_is_fenced(tmp_path):
    """R12: pause the leader of p0 until a new leader is elected, keep it cut off and
    resume it (a zombie that still believes it leads): every stale-epoch request is
    fenced — acks=all produces to the zombie are never acknowledged, fetches and
    ListOffsets carrying the old epoch get FENCED_LEADER_EPOCH from the new leader,
    fetches carrying the new epoch get UNKNOWN_LEADER_EPOCH/NOT_LEADER from the zombie."""
    with region_run(tmp_path, "R12") as run:
        region, topic, proxy = run.region, run.topic, run.region.proxy
        assert proxy is not None
        workload = run.workload()
        run.hold(2.0)
        before = region.partition_state(topic, 0)
        assert before is not None and before.leader >= 0
        zombie, stale = before.leader, before.leader_epoch
        others = [n for n in region.ids if n != zombie]
        outcomes: dict[str, list] = {"produce@zombie": [], "fetch@new(stale)": [],
                                     "list_offsets@new(stale)": [], "fetch@follower(stale)": [],
                                     "fetch@zombie(new)": []}
        with run.nemesis.window(f"zombie n{zombie}"):
            region.pause(zombie)
            new = region.wait_leader(topic, 0, not_in=[zombie], min_epoch=stale + 1,
                                     nodes=others, timeout_s=20)
            proxy.isolate(zombie)
            region.resume(zombie)
            follower = next(n for n in others if n != new.leader)
            for _ in range(10):
                outcomes["produce@zombie"].append(run.probe_produce(zombie, 0))
                outcomes["fetch@new(stale)"].append(_code(probe_fetch(
                    region, new.leader, topic, 0, 0, current_leader_epoch=stale)))
                outcomes["list_offsets@new(stale)"].append(probe_list_offsets(
                    region, new.leader, topic, 0, current_leader_epoch=stale))
                outcomes["fetch@follower(stale)"].append(_code(probe_fetch(
                    region, follower, topic, 0, 0, current_leader_epoch=stale)))
                outcomes["fetch@zombie(new)"].append(_code(probe_fetch(
                    region, zombie, topic, 0, 0, current_leader_epoch=new.leader_epoch)))
            proxy.heal_all()
        run.note(f"zombie n{zombie} at epoch {stale}, new leader n{new.leader} at epoch "
                 f"{new.leader_epoch}: {outcomes}")
        region.wait_healthy(topic, run.partitions, timeout_s=30)
        result = run.finish(workload)
        fenced = ErrorCode.FENCED_LEADER_EPOCH
        context = run.context
        assert 0 not in outcomes["produce@zombie"], f"{context}: zombie acknowledged: {outcomes}"
        assert set(outcomes["fetch@new(stale)"]) == {fenced}, f"{context}: {outcomes}"
        assert set(outcomes["list_offsets@new(stale)"]) == {fenced}, f"{context}: {outcomes}"
        assert 0 not in outcomes["fetch@follower(stale)"], f"{context}: {outcomes}"
        assert set(outcomes["fetch@zombie(new)"]) <= {ErrorCode.UNKNOWN_LEADER_EPOCH,
                                                      ErrorCode.NOT_LEADER}, f"{context}: {outcomes}"
        assert not run.monitor.split_brain(), f"{context}: {run.monitor.split_brain()}"
        result.assert_ok()  # idempotent producers: no duplicates
        run.assert_no_tracebacks()


def _code(answer):
    return None if answer is None else answer[0]


# ---------------------------------------------------------------------- R13


def test_r13_unclean_election_is_detected_and_measured(tmp_path):
    """R13: on a topic with ``unclean.leader.election.enable=true`` (and
    ``min.insync.replicas=1``, so the lone leader keeps acknowledging), the ISR shrinks
    to the leader, the leader dies, an out-of-sync replica is elected: records only the
    dead leader had are lost. A consumer that remembers the epoch of the last batch it
    read detects the truncation with OffsetsForLeaderEpoch (KIP-320), and every lost
    acknowledged record lies in the truncated range it reports."""
    with region_run(tmp_path, "R13", topic_configs={"unclean.leader.election.enable": "true",
                                                    "min.insync.replicas": "1"}) as run:
        region, topic = run.region, run.topic
        workload = run.workload()
        run.hold(2.0)
        leader = run.leader(0)
        with run.nemesis.window(f"unclean election away from n{leader}"):
            followers = _cut_replication_to(run, leader)
            region.wait_isr(topic, 0, {leader}, timeout_s=20)
            run.hold(3.0)  # acknowledged on the leader alone
            state = region.partition_state(topic, 0)
            fetched = probe_fetch(region, leader, topic, 0, 0, current_leader_epoch=-1)
            hw = region.end_offsets(topic, 1)[0]
            # The consumer's position: read everything up to the HW from the leader.
            position = _read_position(region, leader, topic, hw)
            region.kill(leader)
            _restore_followers(run, followers)
            new = region.wait_leader(topic, 0, not_in=[leader], nodes=followers, timeout_s=30)
            run.note(f"unclean election: n{new.leader} leads p0 at epoch {new.leader_epoch} "
                     f"(ISR {new.isr}); dead leader n{leader} had HW {hw}, consumer at {position}")
            check = region.epoch_end_offset(new.leader, topic, 0, position[1],
                                            current_leader_epoch=new.leader_epoch)
            region.start_node(leader)
        region.wait_healthy(topic, run.partitions, timeout_s=45)
        result = run.finish(workload)
        assert fetched is not None and state is not None
        context = run.context
        assert check is not None and check[0] == 0, f"{context}: OffsetsForLeaderEpoch {check}"
        truncated_from = check[2]
        detected = truncated_from < position[0]
        # The loss, measured on the final log: acknowledged p0 values the drain did not
        # find. (The checker's ``lost`` cannot count them: the concurrent reader read them
        # from the old leader before the election, and the new leader's records at the
        # same offsets show up as inconsistent offsets instead.)
        drained = {op.value for op in run.history.ops
                   if op.op == "read" and op.type == "ok" and op.process == "drain"}
        lost_p0 = sorted(op.offset for op in run.history.ops
                         if op.op == "send" and op.type == "ok" and op.partition == 0
                         and op.value not in drained)
        run.note(f"consumer truncation check: epoch {position[1]} ends at {truncated_from} on the new "
                 f"leader, position {position[0]} -> detected={detected}; acknowledged records lost "
                 f"(measured on the final log): {len(lost_p0)}, offsets "
                 f"{lost_p0[:1] + lost_p0[-1:]} (first, last)")
        assert detected, f"{context}: no unclean truncation happened; the scenario did not run"
        assert lost_p0, f"{context}: the leader acknowledged alone, yet nothing was lost?"
        assert lost_p0[0] >= truncated_from, \
            f"{context}: lost offsets {lost_p0[:8]} below the truncation point {truncated_from}"
        assert result.counts["lost"] + result.counts["unseen"] <= len(lost_p0), result.summary()
        # Loss and the inconsistent offsets a reader saw before the truncation are the
        # measured outcome here; nothing else may go wrong.
        bad = [k for k in result.failures(allow_lost=True, allow_fault_duplicates=True)
               if k != "inconsistent_offsets"]
        assert not bad, f"{context}: {result.summary()}"
        run.assert_no_tracebacks()


def _read_position(region, n: int, topic: str, hw: int) -> tuple[int, int]:
    """Fetch p0 from node ``n`` up to ``hw``: (next offset, epoch of the last batch)."""
    offset, epoch = 0, -1
    while offset < hw:
        answer = probe_fetch(region, n, topic, 0, offset, current_leader_epoch=-1)
        assert answer is not None and answer[0] == 0, answer
        last = last_batch_epoch(answer[1])
        if last is None:
            break
        offset, epoch = last
    return offset, epoch


# ---------------------------------------------------------------------- R14


def _r14(tmp_path, *, rounds: int | None, hold_s: float, healed_s: float) -> None:
    """``rounds`` None: each kind once in a seeded order; else that many seeded picks."""
    with region_run(tmp_path, "R14") as run:
        region, topic, proxy = run.region, run.topic, run.region.proxy
        assert proxy is not None
        kinds = list(R14_KINDS)
        if rounds is None:
            run.rng.shuffle(kinds)
        else:
            kinds = [run.rng.choice(R14_KINDS) for _ in range(rounds)]
        run.note(f"plan: {kinds}")
        workload = run.workload()
        run.hold(2.0)
        slow: list[str] = []
        for kind in kinds:
            ids = region.ids
            if kind == "one":
                alone = run.rng.choice(ids)
            elif kind == "majority":  # the active controller alone: the majority elects anew
                alone = region.wait_controller()[0]
            elif kind == "minority":  # the leader of p0 ends up in the minority
                alone = run.leader(0)
            else:  # ring: one pair cut, everyone still reaches a majority
                alone = None
                a, b = run.rng.sample(ids, 2)
            what = f"{kind}: " + (f"n{alone} alone" if alone is not None else f"n{a} x n{b}")
            with run.nemesis.window(f"partition {what}"):
                at = run.history.now_ms()
                if alone is not None:
                    proxy.isolate(alone)
                else:
                    proxy.cut_both(a, b)
                run.hold(hold_s)
                if alone is not None:
                    majority = [n for n in ids if n != alone]

                    def on_majority(s, maj=majority) -> bool:
                        return all((b := s.best(p, nodes=maj)) is not None and b.leader in maj
                                   for p in range(run.partitions))

                    # Keep the cut until the majority leads everything, up to the budget
                    # (an isolated controller costs an election plus a broker session).
                    while (run.monitor.first(on_majority, after_ms=at) is None
                           and run.history.now_ms() < at + R14_NEW_LEADER_MS):
                        run.hold(0.25)
                proxy.heal_all()
            if alone is not None:
                when = run.monitor.first(on_majority, after_ms=at)
                took = None if when is None else when - at
                if took is None or took > R14_NEW_LEADER_MS:
                    slow.append(f"{what}: {took}")
            else:
                took = None
            run.note(f"partition {what} for {hold_s}s; every leader on the majority after {took} ms")
            region.wait_healthy(topic, run.partitions, timeout_s=30)
            run.hold(healed_s)
        result = run.finish(workload)
        context = run.context
        assert not slow, f"{context}: leaders not on the majority within {R14_NEW_LEADER_MS} ms: {slow}"
        assert not run.monitor.split_brain(), f"{context}: {run.monitor.split_brain()}"
        result.assert_ok()  # idempotent producers: no duplicates
        run.assert_no_tracebacks()


def test_r14_random_partitions(tmp_path):
    """R14: one partition of each kind (seeded order), 6 s each, 2 s healed in between."""
    _r14(tmp_path, rounds=None, hold_s=6.0, healed_s=2.0)


@pytest.mark.nightly
@pytest.mark.timeout(900)
def test_r14_random_partitions_long(tmp_path):
    _r14(tmp_path, rounds=25, hold_s=10.0, healed_s=2.0)
