from yurthub import statuses


def test_failure_defaults_reason_from_code() -> None:
    s = statuses.failure(404, "x")
    assert s["reason"] == "NotFound"
    assert s["code"] == 404
    assert s["status"] == "Failure"
    assert statuses.is_status(s)


def test_not_found_wording_matches_apiserver() -> None:
    s = statuses.not_found("deployments", "web", group="apps")
    assert s["message"] == 'deployments.apps "web" not found'
    assert s["details"] == {"name": "web", "group": "apps", "kind": "deployments"}


def test_core_group_is_not_qualified() -> None:
    assert statuses.already_exists("pods", "p")["message"] == 'pods "p" already exists'
    assert statuses.conflict("pods", "p", why="try again")["message"] == (
        'Operation cannot be fulfilled on pods "p": try again'
    )


def test_encode_round_trips() -> None:
    import orjson

    s = statuses.failure(503, "not ready", details={"retryAfterSeconds": 1})
    assert orjson.loads(statuses.encode(s)) == s
