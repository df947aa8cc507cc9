"""deploy/k8s: schema-valid for a current Kubernetes (kubernetes-validate ships the schemas, so this runs offline),
and wired the way an operator relies on: every pod probed and limited, secrets only from the Secret, PDBs that
select real pods, GPU requests and node selectors on the cuda workers, shared volumes ReadWriteMany, autoscaling on
the Celery queues' Redis lists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from service.celery_app import QUEUES

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
CURRENT = "1.33"  # the oldest version the manifests promise; the newest the package knows is checked too
KEDA = "keda.sh/v1alpha1"


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def applied() -> list[dict[str, Any]]:
    kustomization = documents("kustomization.yaml")[0]
    return [doc for name in kustomization["resources"] for doc in documents(name)]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in applied() if d["kind"] == kind]


def pod_specs() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in of_kind("Deployment")}


def test_kustomization_applies_every_manifest_but_the_example_secret() -> None:
    listed = set(documents("kustomization.yaml")[0]["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk - listed == {"secret.example.yaml"}  # applying it would overwrite the real Secret
    assert listed <= on_disk


@pytest.mark.parametrize("version", [CURRENT, kubernetes_validate.utils.latest_version()])
def test_every_builtin_resource_is_valid_against_the_kubernetes_schemas(version: str) -> None:
    docs = [*applied(), *documents("secret.example.yaml")]
    builtin = [d for d in docs if d["apiVersion"] != KEDA]
    assert len(builtin) >= 15
    for doc in builtin:
        kubernetes_validate.validate(doc, version, strict=True)  # raises, naming the field, on any mistake


def test_a_broken_manifest_is_caught() -> None:
    (web,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "web"]
    web["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = {"cores": 2}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(web, CURRENT, strict=True)


def test_the_five_roles_run_as_the_service_image_hardened_probed_and_limited() -> None:
    pods = pod_specs()
    assert set(pods) == {"web", "worker-github", "beat", "worker-cpu", "worker-cuda"}
    for name, pod in pods.items():
        assert pod["automountServiceAccountToken"] is False, name
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["runAsNonRoot"] and security["readOnlyRootFilesystem"], name
            assert security["capabilities"]["drop"] == ["ALL"] and not security["allowPrivilegeEscalation"], name
            assert {"cpu", "memory"} <= set(container["resources"]["limits"]), name
            assert "livenessProbe" in container, name
            assert container["image"].startswith("compile-ci/service"), name


def test_secrets_come_from_the_secret_and_every_key_used_exists() -> None:
    secret = documents("secret.example.yaml")[0]
    keys = set(secret["stringData"])
    config = of_kind("ConfigMap")[0]["data"]
    assert not {"COMPILE_CI_WEBHOOK_SECRET", "COMPILE_CI_DATABASE_URL", "COMPILE_CI_REDIS_URL"} & set(config)
    for name, pod in pod_specs().items():
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["COMPILE_CI_WEBHOOK_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "compile-ci",
                                                                                   "key": "webhook-secret"}, name
        for entry in env.values():
            ref = entry.get("valueFrom", {}).get("secretKeyRef")
            assert ref is None or ref["key"] in keys, (name, ref)
        key_volume = next(v for v in pod["volumes"] if "secret" in v)
        assert {i["key"] for i in key_volume["secret"]["items"]} <= keys


def test_settings_named_in_the_manifests_are_real_settings() -> None:
    known = set(re.findall(r"^(?:# )?(COMPILE_CI_[A-Z0-9_]+)=", (ROOT / "deploy" / "env.example").read_text(), re.M))
    named = set(re.findall(r"\bCOMPILE_CI_[A-Z0-9_]+", "".join(p.read_text() for p in K8S.glob("*.yaml"))))
    assert named and named <= known, named - known


def test_pod_disruption_budgets_select_real_pods() -> None:
    labels = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"] for d in of_kind("Deployment")}
    budgets = {b["metadata"]["name"]: b["spec"] for b in of_kind("PodDisruptionBudget")}
    assert set(budgets) == {"web", "worker-github", "worker-cpu", "worker-cuda"}  # beat: one replica, always movable
    for name, spec in budgets.items():
        assert spec["selector"]["matchLabels"] == labels[name]


def test_cuda_workers_request_a_gpu_on_gpu_nodes_and_cpu_workers_do_not() -> None:
    pods = pod_specs()
    cuda, cpu = pods["worker-cuda"], pods["worker-cpu"]
    assert cuda["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert cuda["nodeSelector"] == {"compile-ci/cuda-runner": "true"}
    assert "nvidia.com/gpu" not in cpu["containers"][0]["resources"]["limits"]
    assert cpu["nodeSelector"] == {"compile-ci/cpu-runner": "true"}
    for pod in (cpu, cuda):
        assert "--queues" in pod["containers"][0]["args"]
        assert any(v.get("hostPath", {}).get("type") == "Socket" for v in pod["volumes"])
    for name in ("web", "worker-github", "beat"):
        assert not any("hostPath" in v for v in pods[name]["volumes"]), f"{name} must not reach the node"


def test_artifacts_are_on_a_read_write_many_claim_the_web_mounts_where_workers_write() -> None:
    (claim,) = of_kind("PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    artifacts = of_kind("ConfigMap")[0]["data"]["COMPILE_CI_ARTIFACTS_DIR"]
    web = pod_specs()["web"]
    assert any(v.get("persistentVolumeClaim", {}).get("claimName") == claim["metadata"]["name"] for v in web["volumes"])
    assert any(m["mountPath"] == artifacts for m in web["containers"][0]["volumeMounts"])
    for worker in ("worker-cpu", "worker-cuda"):
        mounts = [m["mountPath"] for m in pod_specs()[worker]["containers"][0]["volumeMounts"]]
        assert any(artifacts.startswith(m + "/") for m in mounts), worker


def test_runner_workers_autoscale_on_their_queue_length() -> None:
    scaled = {d["spec"]["scaleTargetRef"]["name"]: d["spec"] for d in applied() if d["kind"] == "ScaledObject"}
    assert set(scaled) == {"worker-cpu", "worker-cuda"}
    for target, spec in scaled.items():
        (trigger,) = spec["triggers"]
        assert trigger["type"] == "redis" and trigger["metadata"]["listName"] in QUEUES
        assert trigger["metadata"]["listName"] == target.removeprefix("worker-")
        assert 1 <= spec["minReplicaCount"] < spec["maxReplicaCount"]
    (auth,) = [d for d in applied() if d["kind"] == "TriggerAuthentication"]
    assert {r["key"] for r in auth["spec"]["secretTargetRef"]} <= set(documents("secret.example.yaml")[0]["stringData"])


def test_the_web_service_reaches_gunicorn_only_through_its_buffering_front() -> None:
    (service,) = [d for d in of_kind("Service") if d["metadata"]["name"] == "web"]
    containers = {c["name"]: c for c in pod_specs()["web"]["containers"]}
    (target,) = [c for c in containers.values()
                 if any(p["name"] == service["spec"]["ports"][0]["targetPort"] for p in c["ports"])]
    assert target["args"][0] == "front"  # nginx, with request buffering (service/web/front.py)
    upstream = target["args"][target["args"].index("--upstream") + 1]
    gunicorn = containers["web"]
    assert upstream == f"127.0.0.1:{gunicorn['ports'][0]['containerPort']}"
    for container in (target, gunicorn):  # ready without the database: an outage answers 503, not "no endpoint"
        assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
