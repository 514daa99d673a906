"""The real node starts its kubelet again only after kubelet 1.35.4's start-up data race
(tools/k8s/node.py: kubelet_hit_start_race), and only for what that start wrote to the log."""

from tools.k8s import node

RACE_CRASH = """I1205 15:47:50.186092    1927 policy_none.go:44] "Start"
fatal error: concurrent map read and map write

goroutine 447 [running]:
k8s.io/kubernetes/pkg/kubelet/cm.hardEvictionReservation({0x2b7bf92dc500, 0x4, 0xa8?}, 0x2b7bf92d7800)
"""
CONFIG_ERROR = 'E1205 15:47:50.1 server.go:300] "command failed" err="failed to load kubelet config file"\n'


def test_the_start_race_in_this_starts_log_gets_another_start(tmp_path):
    log = tmp_path / "kubelet.log"
    log.write_text(RACE_CRASH)
    assert node.kubelet_hit_start_race(str(log), 0)


def test_any_other_exit_does_not(tmp_path):
    log = tmp_path / "kubelet.log"
    log.write_text(CONFIG_ERROR)
    assert not node.kubelet_hit_start_race(str(log), 0)
    assert not node.kubelet_hit_start_race(str(tmp_path / "missing.log"), 0)


def test_a_race_an_earlier_start_survived_is_not_read_again(tmp_path):
    log = tmp_path / "kubelet.log"
    log.write_text(RACE_CRASH)
    earlier = log.stat().st_size
    log.write_text(RACE_CRASH + CONFIG_ERROR)
    assert not node.kubelet_hit_start_race(str(log), earlier)
