"""Launcher configs, manifests and the image definition: parsed, required fields present,
GPU requests set, image and commands consistent with each other and the cluster docs."""

import re
from pathlib import Path

import yaml

from orchestrator.spec.file import load_spec

ROOT = Path(__file__).parents[2]
INFRA = ROOT / "infra"
IMAGE = "ghcr.io/specsweep/specsweep:0.1.0"


def docs(path):
    return [d for d in yaml.safe_load_all((INFRA / path).read_text()) if d]


def containers(template):
    return template["spec"]["containers"]


def test_raycluster_has_cpu_head_and_one_gpu_per_worker():
    (cluster,) = docs("k8s/raycluster.yaml")
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["kind"] == "RayCluster"
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    assert all(c["image"] == IMAGE for c in containers(head["template"]))
    (gpu,) = cluster["spec"]["workerGroupSpecs"]
    for c in containers(gpu["template"]):
        assert c["image"] == IMAGE
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 1 == c["resources"]["requests"]["nvidia.com/gpu"]
    assert gpu["minReplicas"] <= gpu["replicas"] <= gpu["maxReplicas"]


def test_rayjob_runs_a_sweep_that_exists_on_its_cluster():
    (job,) = docs("k8s/rayjob.yaml")
    assert job["kind"] == "RayJob" and job["spec"]["shutdownAfterJobFinishes"] is True
    m = re.fullmatch(
        r"specsweep run (sweeps/\S+\.yaml) --ray-address auto --tracking-uri (\S+)", job["spec"]["entrypoint"]
    )
    assert m and (ROOT / m.group(1)).is_file()
    load_spec(ROOT / m.group(1))  # the spec it runs is valid
    assert m.group(2) == "http://mlflow:5000"
    spec = job["spec"]["rayClusterSpec"]
    for group in spec["workerGroupSpecs"]:
        assert all(c["resources"]["limits"]["nvidia.com/gpu"] == 1 for c in containers(group["template"]))
    assert all(c["image"] == IMAGE for c in containers(spec["headGroupSpec"]["template"]))


def test_mlflow_deployment_has_postgres_object_store_auth_and_a_service():
    kinds = {(d["kind"], d["metadata"]["name"]): d for d in docs("k8s/mlflow.yaml")}
    assert {
        ("Service", "mlflow"),
        ("Deployment", "mlflow"),
        ("StatefulSet", "mlflow-postgres"),
        ("Service", "mlflow-postgres"),
        ("ConfigMap", "mlflow-basic-auth"),
    } <= kinds.keys()
    (server,) = containers(kinds[("Deployment", "mlflow")]["spec"]["template"])
    command = " ".join(server["args"])
    for part in (
        "--backend-store-uri postgresql://",
        "--artifacts-destination s3://",
        "--app-name basic-auth",
    ):
        assert part in command
    assert kinds[("Service", "mlflow")]["spec"]["ports"][0]["port"] == 5000


def test_ray_launcher_configs_install_specsweep_and_give_workers_gpus():
    aws = yaml.safe_load((INFRA / "ray/cluster-aws.yaml").read_text())
    assert aws["provider"]["type"] == "aws" and aws["docker"]["image"] == IMAGE
    assert aws["available_node_types"]["gpu_worker"]["resources"] == {"GPU": 1}
    assert aws["available_node_types"][aws["head_node_type"]]["resources"] == {"CPU": 0}
    onprem = yaml.safe_load((INFRA / "ray/cluster-onprem.yaml").read_text())
    assert onprem["provider"]["type"] == "local" and onprem["provider"]["worker_ips"]
    for config in (aws, onprem):
        assert any("pip install" in c and "specsweep" in c for c in config["setup_commands"])
        assert any("ray start --head" in c for c in config["head_start_ray_commands"])
        assert any("ray start --address" in c for c in config["worker_start_ray_commands"])


def test_dockerfile_is_cuda_based_non_root_and_installs_the_repo():
    text = (INFRA / "docker/Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=pytorch/pytorch:\S+cuda\S+", text, re.M)
    assert "FROM ${BASE_IMAGE}" in text
    for arg in ("RAY_VERSION", "MLFLOW_VERSION"):
        assert re.search(rf"^ARG {arg}=\S+", text, re.M)
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1] not in ("root", "0")
    assert re.search(r"pip install .* \.", text.replace("\\\n", " "))
    assert "HEALTHCHECK" not in text


def test_the_cluster_docs_commands_match_the_infra():
    section = (ROOT / "docs" / "cluster.md").read_text()
    for needed in (
        "infra/docker/Dockerfile",
        "infra/ray/cluster-aws.yaml",
        "infra/ray/cluster-onprem.yaml",
        "infra/k8s/raycluster.yaml",
        "infra/k8s/rayjob.yaml",
        "infra/k8s/mlflow.yaml",
        "--ray-address",
        "make mlflow",
        IMAGE.split(":")[0],
    ):
        assert needed in section, needed
