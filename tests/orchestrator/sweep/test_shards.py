"""The shard queue's rules without Ray: fake workers whose calls succeed, raise, or die."""

from dataclasses import replace

from orchestrator.engines.shard import Shard
from orchestrator.spec.space import Candidate
from orchestrator.sweep.shards import (
    DEPTH,
    MAX_ATTEMPTS,
    MAX_LOST,
    Job,
    ShardFailed,
    ShardQueue,
    WorkerLost,
    split,
)
from workloads.decoding import DecodeConfig
from workloads.serving.config import ServingConfig


class Handle:
    """A call in flight, hashed by identity like a Ray ObjectRef."""

    def __init__(self, worker, outcome, shards=()):
        self.worker, self.outcome, self.shards = worker, outcome, shards


class Workers:
    """`outcomes[worker]` lists what its successive calls do: "ok", "raise" or "die". A dead
    worker's probe stays unready for `down` collects, then it is back."""

    def __init__(self, outcomes: dict[int, list[str]], down: int = 0):
        self.outcomes, self.down = outcomes, down
        self.calls: list[tuple[int, tuple]] = []  # (worker, prompt indices) per submit
        self.together: list[int] = []  # shards per submit
        self.probes = 0

    def submit(self, worker, shards):
        self.calls.append((worker, shards[0].indices))
        self.together.append(len(shards))
        plan = self.outcomes.get(worker, [])
        return Handle(worker, plan.pop(0) if plan else "ok", shards)

    def probe(self, worker):
        self.probes += 1
        return Handle(worker, "back" if self.probes > self.down else "down")

    @staticmethod
    def wait(handles, timeout):
        return handles[:1]

    @staticmethod
    def fetch(handle):
        if handle.outcome in ("die", "down"):
            raise WorkerLost
        if handle.outcome == "raise":
            raise ShardFailed("ValueError: bad config")
        return [{"worker": handle.worker, "records": list(shard.indices), "trial": shard.trial}
                for shard in handle.shards]


def queue(tmp_path, workers, serves=None):
    return ShardQueue(serves or {0: ["toy"], 1: ["toy"]}, tmp_path, "task", workers.submit, workers.wait,
                      workers.fetch, workers.probe)


def job(shards=2, pair="toy"):
    return Job(f"trial:{shards}", "t", Candidate(pair, DecodeConfig()),
               [Shard(0, pair, DecodeConfig(block=4), (2 * i, 2 * i + 1)) for i in range(shards)])


def drain(q, limit=100):
    done = []
    for _ in range(limit):
        q.dispatch()
        done += q.collect(0)
        if not q.inflight and not q.pending and not q.restarting:
            return done
    raise AssertionError("queue did not drain")


def test_split_gives_each_worker_whole_batches_of_at_least_min_shard_prompts():
    assert split(24, 2, 1) == [(0, 12), (12, 24)]
    assert split(10, 4, 1) == [(0, 10)]  # two workers would get 5 < MIN_SHARD each
    assert split(5, 3, 1) == [(0, 5)]
    assert split(20, 2, 8) == [(0, 16), (16, 20)]  # batches of 8: only the last is short
    assert split(64, 3, 4) == [(0, 24), (24, 48), (48, 64)]


def test_shards_spread_over_workers_at_most_depth_each(tmp_path):
    w = Workers({})
    q = queue(tmp_path, w)
    q.add(job(shards=5))
    q.dispatch()
    assert sorted(q.load.values()) == [DEPTH, DEPTH]  # 4 handed out, least loaded first
    assert [c[0] for c in w.calls] == [0, 1, 0, 1]
    assert len(q.pending) == 1
    assert drain(q)[0].done


def test_a_finished_shard_is_cached_and_not_decoded_again(tmp_path):
    w = Workers({})
    q = queue(tmp_path, w)
    first = job()
    q.add(first)
    drain(q)
    assert len(w.calls) == 2 and len(list(tmp_path.glob("*.json"))) == 2
    again = job()
    queue(tmp_path, w).add(again)
    assert again.done and again.results == first.results and len(w.calls) == 2
    next(tmp_path.glob("*.json")).write_text('{"records": [{"ind')  # what a crash mid-write once left
    third = job()
    q3 = queue(tmp_path, w)
    q3.add(third)
    assert len(q3.pending) == 1


def test_a_shard_that_raises_is_retried_then_fails_its_job(tmp_path):
    w = Workers({0: ["raise"] * MAX_ATTEMPTS})
    q = queue(tmp_path, w, serves={0: ["toy"]})
    j = job(shards=1)
    q.add(j)
    assert drain(q) == [j]
    assert j.error == "ValueError: bad config" and j.attempts == {0: MAX_ATTEMPTS}
    assert len(w.calls) == MAX_ATTEMPTS


def test_a_failed_job_drops_its_other_shards(tmp_path):
    w = Workers({0: ["raise"] * 4})
    q = queue(tmp_path, w, serves={0: ["toy"]})
    j = job(shards=3)
    q.add(j)
    done = drain(q)
    assert done == [j] and j.error and not q.pending
    assert len(w.calls) < 2 + 3  # the third shard never ran after the job failed


def test_a_shard_lost_after_its_job_failed_is_not_decoded_again(tmp_path):
    w = Workers({0: ["raise", "raise", "raise", "die"]})
    q = queue(tmp_path, w, serves={0: ["toy"]})
    j = job(shards=3)
    q.add(j)
    assert drain(q) == [j] and j.error == "ValueError: bad config"
    assert len(w.calls) == 4  # shard 1 died after shard 0 failed the job: dropped, not queued


def test_a_dead_worker_gets_nothing_until_its_probe_says_it_is_back(tmp_path):
    w = Workers({0: ["die"]}, down=2)
    q = queue(tmp_path, w)
    j = job(shards=1)
    q.add(j)
    q.dispatch()
    q.collect(0)  # worker 0 died under the shard
    assert 0 in q.restarting and j.lost == {0: 1}
    q.dispatch()
    assert w.calls[-1][0] == 1  # requeued at the front, for the other worker
    assert drain(q) == [j] and j.error is None and j.results[0]["worker"] == 1
    assert w.probes == 3  # asked again while it was down


def test_one_death_counts_once_and_max_lost_deaths_fail_the_job(tmp_path):
    w = Workers({0: ["die"] * MAX_LOST})
    q = queue(tmp_path, w, serves={0: ["toy"]})  # the only worker: it must wait for the restart
    j = job(shards=1)
    q.add(j)
    assert drain(q) == [j]
    assert j.lost == {0: MAX_LOST} and j.error == f"shard 0: its worker died {MAX_LOST} times"


def test_a_worker_dying_under_several_shards_requeues_each_of_them(tmp_path):
    w = Workers({0: ["die"] * DEPTH})  # worker 0 dies holding DEPTH shards
    q = queue(tmp_path, w)
    j = job(shards=2 * DEPTH)
    q.add(j)
    assert drain(q) == [j] and j.error is None and j.done
    assert sorted(j.lost) == [0, 2] and set(j.lost.values()) == {1}  # the shards worker 0 held
    assert sorted(r["records"][0] for r in j.results.values()) == [0, 2, 4, 6]


def test_several_workers_dying_with_shards_of_several_jobs_lose_nothing(tmp_path):
    w = Workers({0: ["die"] * DEPTH, 1: ["ok", "die"], 2: ["die"]}, down=1)
    q = queue(tmp_path, w, serves={0: ["toy"], 1: ["toy"], 2: ["toy"]})
    jobs = [job(shards=3), job(shards=2), job(shards=4)]
    for j in jobs:
        q.add(j)
    done = drain(q)
    assert sorted(map(id, done)) == sorted(map(id, jobs))  # each job handed back once
    assert all(j.error is None and j.done for j in jobs) and q.restarting == {}


def test_a_shard_goes_only_to_workers_that_serve_its_pair(tmp_path):
    w = Workers({})
    q = queue(tmp_path, w, serves={0: ["toy"], 1: ["toy-self"]})
    q.add(job(shards=3, pair="toy-self"))
    drain(q)
    assert {c[0] for c in w.calls} == {1}


def test_the_cache_key_holds_the_task_and_the_control(tmp_path):
    shard = job(shards=1).shards[0]
    path, other = (ShardQueue({0: ["toy"]}, tmp_path, salt, None, None, None, None).cache_path
                   for salt in ("task-a", "task-b"))
    assert path(shard) != other(shard)
    config, control = DecodeConfig(block=4), DecodeConfig(schedule="ar")
    assert path(shard) != path(Shard(0, "toy", config, (0, 1), control=control))
    assert path(shard) == path(Shard(7, "toy", config, (0, 1)))  # the trial number is not in it


def served_job(number, drafts, indices=(0, 1), concurrency=2):
    """A served trial's job of one shard, on the server started at 7 drafts a step."""
    config = ServingConfig(method="dflash", num_speculative_tokens=drafts, concurrency=concurrency)
    shard = Shard(number, "toy", config, indices, config.unspeculative(), concurrency, 3, 7,
                  start=("toy", "dflash"))
    return Job(f"trial:{number}", "t", Candidate("toy", config, concurrency), [shard])


def test_served_shards_on_one_start_control_and_prompts_go_in_one_call_and_come_back_apart(tmp_path):
    w = Workers({})
    q = queue(tmp_path, w, serves={0: ["toy"]})
    jobs = [served_job(1, 3), served_job(2, 5), served_job(3, 7),
            served_job(4, 3, concurrency=4),  # another control
            served_job(5, 5, indices=(2, 3))]  # other prompts
    for j in jobs:
        q.add(j)
    done = drain(q)
    assert sorted(w.together) == [1, 1, 3]
    assert sorted(map(id, done)) == sorted(map(id, jobs))
    assert [j.results[0]["trial"] for j in jobs] == [1, 2, 3, 4, 5]  # each its own result
    assert len(list(tmp_path.glob("*.json"))) == 5  # and its own cache entry
    again = [served_job(1, 3), served_job(2, 5)]
    for j in again:
        queue(tmp_path, w).add(j)
    assert all(j.done for j in again)


def test_a_call_of_several_shards_that_fails_or_dies_counts_against_each(tmp_path):
    w = Workers({0: ["die", "raise", "raise"]}, down=0)
    q = queue(tmp_path, w, serves={0: ["toy"]})
    jobs = [served_job(1, 3), served_job(2, 5)]
    for j in jobs:
        q.add(j)
    done = drain(q)
    assert sorted(map(id, done)) == sorted(map(id, jobs))
    assert w.together == [2, 2, 2]  # retried together after the death and the first failure
    assert all(j.lost == {0: 1} and j.attempts == {0: MAX_ATTEMPTS} for j in jobs)
    assert all(j.error == "ValueError: bad config" for j in jobs)


def test_a_trial_its_controls_own_server_serves_joins_one_start_of_its_control(tmp_path):
    w = Workers({})
    q = queue(tmp_path, w, serves={0: ["toy"]})
    plain = ServingConfig(concurrency=2)  # served by the control's server
    rider = Job("trial:0", "t", Candidate("toy", plain, 2),
                [Shard(0, "toy", plain, (0, 1), plain, 2, 3, 7, start=("toy", "none"))])
    other = served_job(9, 3)
    other.shards[0] = replace(other.shards[0], start=("toy", "ngram"))  # another start
    jobs = [rider, served_job(1, 3), other, served_job(2, 5)]
    for j in jobs:
        q.add(j)
    assert rider.shards[0].together[0] is None
    drain(q)
    assert w.together == [3, 1]  # the rider with the first start pending (DFlash's two); ngram's alone
