"""What the real node's clean-up (tools/k8s/node.py) takes for ours in iptables-save output:
the chains by prefix, and the rules in other chains that jump to them or carry our marker
(kube-router's ACCEPT in the built-in chains; tools/k8s/netpol.py)."""

from tools.k8s import netpol, node

SAVE = """\
*mangle
:PREROUTING ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:PADDLECLOUD-NETPOL-EGRESS - [0:0]
-A FORWARD -j PADDLECLOUD-NETPOL-EGRESS
-A PADDLECLOUD-NETPOL-EGRESS -i pcbr0 ! -o pcbr0 -j DROP
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:DOCKER-USER - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-ROUTER-FORWARD - [0:0]
:KUBE-POD-FW-ABC - [0:0]
:PADDLECLOUD-EGRESS - [0:0]
-A INPUT -m comment --comment "KUBE-ROUTER rule to explicitly ACCEPT traffic that comply to network policies" -m mark --mark 0x20000/0x20000 -j ACCEPT
-A FORWARD -m comment --comment "kube-router netpol - 4IA2OSFRMVNDXBVV" -j KUBE-ROUTER-FORWARD
-A FORWARD -j PADDLECLOUD-EGRESS
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -j DOCKER-USER
-A KUBE-ROUTER-FORWARD -d 198.18.1.3/32 -j KUBE-POD-FW-ABC
-A PADDLECLOUD-EGRESS -i pcbr0 ! -o pcbr0 -j DROP
COMMIT
"""
ROUTER = (*netpol.CHAIN_PREFIXES, netpol.EGRESS_CHAIN)


def test_the_enforcers_chains_and_rules_and_nothing_of_the_nodes():
    assert node.our_chains(SAVE, ROUTER) == {"mangle": ["PADDLECLOUD-NETPOL-EGRESS"],
                                             "filter": ["KUBE-ROUTER-FORWARD", "KUBE-POD-FW-ABC"]}
    assert node.rules_to_delete(SAVE, ROUTER) == [
        ("mangle", "FORWARD -j PADDLECLOUD-NETPOL-EGRESS"),
        ("filter", 'INPUT -m comment --comment "KUBE-ROUTER rule to explicitly ACCEPT traffic that comply to '
                   'network policies" -m mark --mark 0x20000/0x20000 -j ACCEPT'),
        ("filter", 'FORWARD -m comment --comment "kube-router netpol - 4IA2OSFRMVNDXBVV" -j KUBE-ROUTER-FORWARD')]


def test_the_nodes_teardown_takes_all_of_ours_and_leaves_the_hosts():
    assert node.our_chains(SAVE) == {"mangle": ["PADDLECLOUD-NETPOL-EGRESS"], "filter": [
        "KUBE-FORWARD", "KUBE-ROUTER-FORWARD", "KUBE-POD-FW-ABC", "PADDLECLOUD-EGRESS"]}
    deleted = node.rules_to_delete(SAVE)
    assert [rule.split()[-1] for _, rule in deleted] == [
        "PADDLECLOUD-NETPOL-EGRESS", "ACCEPT", "KUBE-ROUTER-FORWARD", "PADDLECLOUD-EGRESS", "KUBE-FORWARD"]
    assert not any("DOCKER-USER" in rule for _, rule in deleted)
