"""What the driver keeps while a cluster run goes on (issue 48: peak RSS flat with the tiles)."""

from __future__ import annotations


def test_the_client_does_not_keep_what_a_cluster_run_sent(tmp_path):
    # found at 10^5 tiles (+105 MB of slow growth): Dask's client keeps its last 1,000 sent batches for its
    # developers (each up to 1 MB), and a cluster run's merge tasks carry their pieces: the driver held them
    from distributed import Client, LocalCluster
    from distributed.diagnostics.plugin import SchedulerPlugin

    from sam3tiles.run.executing.engine import SENT_LOG
    from sam3tiles.run.pipeline import segment_job
    from sam3tiles.testing.demo import write_scene

    src = tmp_path / "scene.tif"
    write_scene(src, 2600, 2200, seed=2)
    seen = {}
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, resources={"GPU": 1},
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        stream = client.scheduler_comm
        before = stream.recent_message_log.maxlen

        class Look(SchedulerPlugin):  # while the run holds the client: each task done
            def transition(self, key, start, finish, *args, **kwargs):
                if finish == "memory":
                    seen["len"] = max(seen.get("len", 0), len(stream.recent_message_log))

        cluster.scheduler.add_plugin(Look())  # this object itself: the scheduler runs in this process
        _, report = segment_job(str(src), ["blue", "red"], backend="reference", checkpoint=False, tile_size=512,
                                overlap=100, merge_block=1, client=client)
        after = stream.recent_message_log.maxlen
    assert report.tiles >= 30
    assert seen["len"] <= SENT_LOG, seen  # 53 batches kept before (their merges' pieces)
    assert after == before  # the caller's client keeps its own setting
