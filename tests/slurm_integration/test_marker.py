from slurm_marl.slurm_integration.marker import Marker, parse_marker, with_marker


def test_round_trip_and_admin_text_kept():
    m = Marker("gres:gpu:2", "")
    text = with_marker("ticket 123", m)
    assert text == "ticket 123|slurm-marl:v1;tpn=gres:gpu:2;tpj="
    assert parse_marker(text) == m
    # Rewriting replaces the old marker instead of stacking a second one.
    again = with_marker(text, Marker("", "gres:gpu:4"))
    assert again.count("slurm-marl:v1") == 1 and again.startswith("ticket 123|")
    assert parse_marker(again) == Marker("", "gres:gpu:4")


def test_unmarked_job():
    assert parse_marker("") is None and parse_marker(None) is None
    assert parse_marker("some admin note") is None
    assert with_marker(None, Marker("gres:gpu:s0:1,gres:gpu:s1:1")) == \
        "slurm-marl:v1;tpn=gres:gpu:s0:1,gres:gpu:s1:1;tpj="


def test_required_nodes_recorded_or_unknown():
    mine = parse_marker("slurm-marl:v1;tpn=gres:gpu:1;tpj=;req=")
    assert mine.required_nodes == "" and mine.user_gave_no_nodes
    users = parse_marker("slurm-marl:v1;tpn=gres:gpu:1;tpj=;req=n[1-2]")
    assert users.required_nodes == "n[1-2]" and not users.user_gave_no_nodes
    old = parse_marker("slurm-marl:v1;tpn=gres:gpu:1;tpj=")   # before req existed
    assert old.required_nodes is None and not old.user_gave_no_nodes
    assert parse_marker(with_marker("", users)) == users
