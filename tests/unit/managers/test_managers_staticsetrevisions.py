"""``staticsetrevisions``: each template rolled out is a numbered ControllerRevision, going
back renumbers the old one, yurt-manager's last template is recorded first on a hand-over, old
ones are pruned past the history limit, and undo picks the newest other template."""

from __future__ import annotations

from typing import Any

import yaml

from managers import staticsetplanning, staticsetrevisions

UID = "yss-uid"


def template(image: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "yurt-hub", "labels": {"k8s-app": "yurt-hub"}},
        "spec": {"containers": [{"name": "hub", "image": image}]},
    }


YURTHUB = template("openyurt/yurthub:v1.7.0")
EDGEHUB = template("ghcr.io/edgehub/edgehub:0.1.0")
H_YURTHUB = staticsetplanning.template_hash(YURTHUB)
H_EDGEHUB = staticsetplanning.template_hash(EDGEHUB)


def spec(tmpl: dict[str, Any]) -> staticsetplanning.Spec:
    return staticsetplanning.read_spec(
        {
            "metadata": {"name": "yurt-hub", "namespace": "kube-system", "uid": UID},
            "spec": {
                "staticPodManifest": "yurthub",
                "upgradeStrategy": {"type": "AdvancedRollingUpdate"},
                "template": tmpl,
            },
        }
    )


def stored(tmpl: dict[str, Any], number: int) -> staticsetrevisions.Revision:
    digest = staticsetplanning.template_hash(tmpl)
    obj = staticsetrevisions.revision_object(spec(tmpl), tmpl, digest, number)
    found = staticsetrevisions.read(obj)
    assert found is not None
    return found


def test_the_first_template_seen_is_revision_one() -> None:
    decided = staticsetrevisions.plan(spec(YURTHUB), H_YURTHUB, [], 10)
    (obj,) = decided.create
    assert obj["revision"] == 1 and obj["metadata"]["name"] == f"yurt-hub-{H_YURTHUB}"
    assert obj["metadata"]["labels"] == {
        staticsetrevisions.UID_LABEL: UID,
        staticsetrevisions.HASH_LABEL: H_YURTHUB,
    }
    assert obj["metadata"]["ownerReferences"][0]["uid"] == UID
    assert obj["data"] == {"spec": {"template": YURTHUB}}
    assert decided.renumber == () and decided.prune == ()


def test_a_hand_over_records_yurt_managers_template_first() -> None:
    manifest = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                **YURTHUB["metadata"],
                "annotations": {staticsetplanning.HASH_ANNOTATION: "openyurts-hash"},
            },
            "spec": YURTHUB["spec"],
        }
    )
    handed = staticsetrevisions.template_of_manifest(manifest)
    assert handed == YURTHUB
    decided = staticsetrevisions.plan(spec(EDGEHUB), H_EDGEHUB, [], 10, handed)
    assert [(o["revision"], o["data"]["spec"]["template"]) for o in decided.create] == [
        (1, YURTHUB),
        (2, EDGEHUB),
    ]
    # The same template in the ConfigMap: recorded once.
    same = staticsetrevisions.plan(spec(EDGEHUB), H_EDGEHUB, [], 10, EDGEHUB)
    assert [o["revision"] for o in same.create] == [1]
    # Revisions exist already: the ConfigMap is not looked at.
    later = staticsetrevisions.plan(spec(EDGEHUB), H_EDGEHUB, [stored(YURTHUB, 1)], 10, handed)
    assert [o["revision"] for o in later.create] == [2]


def test_going_back_renumbers_the_old_revision_as_the_newest() -> None:
    existing = [stored(YURTHUB, 1), stored(EDGEHUB, 2)]
    decided = staticsetrevisions.plan(spec(YURTHUB), H_YURTHUB, existing, 10)
    assert decided.create == ()
    assert [(r.hash, n) for r, n in decided.renumber] == [(H_YURTHUB, 3)]
    # Already the newest: nothing to do.
    idle = staticsetrevisions.plan(spec(EDGEHUB), H_EDGEHUB, existing, 10)
    assert idle == staticsetrevisions.Plan()


def test_the_oldest_other_revisions_go_past_the_limit() -> None:
    existing = [stored(template(f"img:{i}"), i) for i in range(1, 4)]
    new = template("img:new")
    decided = staticsetrevisions.plan(spec(new), staticsetplanning.template_hash(new), existing, 2)
    assert [o["revision"] for o in decided.create] == [4]
    assert [r.number for r in decided.prune] == [1, 2]


def test_undo_picks_the_newest_other_template_or_the_one_asked() -> None:
    revisions = [stored(YURTHUB, 1), stored(template("e:1"), 2), stored(EDGEHUB, 3)]
    picked = staticsetrevisions.previous(revisions, H_EDGEHUB)
    assert isinstance(picked, staticsetrevisions.Revision) and picked.number == 2
    asked = staticsetrevisions.previous(revisions, H_EDGEHUB, 1)
    assert isinstance(asked, staticsetrevisions.Revision) and asked.template == YURTHUB
    assert staticsetrevisions.previous(revisions, H_EDGEHUB, 3) == (
        "revision 3 is the current template already"
    )
    assert staticsetrevisions.previous(revisions, H_EDGEHUB, 9) == (
        "no revision 9 (revisions: 1, 2, 3)"
    )
    assert "no earlier template" in str(staticsetrevisions.previous([], H_EDGEHUB))


def test_only_the_yurtstaticsets_own_revisions_are_read() -> None:
    mine = staticsetrevisions.revision_object(spec(YURTHUB), YURTHUB, H_YURTHUB, 1)
    theirs = {**mine, "metadata": {**mine["metadata"], "labels": {"other": "x"}}}
    broken = {**mine, "revision": "one"}
    assert [r.number for r in staticsetrevisions.owned([theirs, broken, mine], UID)] == [1]
    assert staticsetrevisions.history_limit({"spec": {"revisionHistoryLimit": 3}}) == 3
    assert staticsetrevisions.history_limit({"spec": {}}) == 10
    assert staticsetrevisions.images(EDGEHUB) == "ghcr.io/edgehub/edgehub:0.1.0"
