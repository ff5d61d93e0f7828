"""Kubernetes flavour: the run as a Kubeflow PyTorchJob (training-operator) on Kubernetes.

One pod per node: ``<job>-master-0`` on the first node, ``<job>-worker-<i>`` on the others,
``restartPolicy: OnFailure``. What happens at the end of an attempt (docs/simulate.md has the
table):

* a training process that fails (GPU, network, OOM, software …) ends its container: the
  failing pod's container terminates ``Error`` (or ``OOMKilled``), its peers lose their NCCL
  peers and exit 1, and the kubelet restarts every container in place (``BackOff``, then
  ``restartCount`` + 1 and ``lastState.terminated``);
* a pod that cannot stay (its node is lost, cordoned and drained after a hardware fault,
  preempted, evicted for maintenance, past its ``activeDeadlineSeconds``, deleted by a user)
  is deleted and the operator creates it again (``SuccessfulCreatePod``); the scheduler places
  it (``FailedScheduling`` while it waits, ``Scheduled``), possibly on a spare node.

Files: ``events.json`` (``kubectl get events -A -o json``), ``pytorchjob.yaml`` (``kubectl get
pytorchjob -o yaml``: the last PyTorchJob object), ``pods/<pod>.attempt-<k>.yaml`` (``kubectl
get pod -o yaml`` captured when attempt k's container ended: after an in-place restart, or just
before the pod was deleted, or at the end), ``logs/<pod>.log`` (the container's output over
all attempts) and ``nodes/<host>/kern.log``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toranalyze.simulate import emit_trainer as TR
from toranalyze.simulate import fmt
from toranalyze.simulate import k8s_objects as KO
from toranalyze.simulate.emit_nccl import init_chatter
from toranalyze.simulate.emit_torch import launcher_start
from toranalyze.simulate.evidence import Evidence, attempt_evidence
from toranalyze.simulate.k8s_objects import NS, US, Note, Seen, Source, ts
from toranalyze.simulate.kyaml import list_json_chunks, to_yaml
from toranalyze.simulate.timeline import REPLACES_NODE, Attempt, Incident, Timeline
from toranalyze.simulate.wild import KERNEL_FILE, PLAIN, WildJob, pod_view
from toranalyze.simulate.writer import PY_WARNINGS, Line, RunWriter, merged, write_lines

# how an attempt's end reaches the pods
CONTAINER_FAILS = frozenset({"collective_timeout", "storage", "oom_gpu", "oom_host", "software", "unknown",
                             "gpu_hardware", "gpu_memory", "gpu_interconnect", "network"})
NODE_LOST = frozenset({"node_failure", "host_hardware"})
SIGTERM_EXIT = 143


@dataclass
class PyJob:
    """One PyTorchJob object (a user_cancel deletes it; the resubmission is a new object)."""

    uid: str
    created: int
    index: int


@dataclass
class Pod:
    """One pod object (a uid): lives across in-place restarts, replaced when deleted."""

    name: str
    ni: int
    rtype: str
    rindex: int
    uid: str
    node: str
    created: int
    scheduled: int
    start_time: int
    ip: str
    job: PyJob
    restarts: int = 0
    last_term: dict[str, Any] | None = None


@dataclass
class Run:
    """One container run: one pod in one attempt."""

    pod: Pod
    started: int
    cid: str
    end: str = "final"  # inplace | deleted | lost | final
    reason: str | None = None  # container termination reason (None: never seen terminated)
    code: int | None = None
    finished: int | None = None
    disruption: tuple[str, str, int] | None = None  # DisruptionTarget (reason, message, time)
    pod_reason: tuple[str, str] | None = None  # status.reason / status.message
    deleted: int | None = None  # deletion requested
    not_ready: int | None = None  # node lost: Ready=False at
    restart: int | None = None  # in-place: the next container's start
    restart_cid: str = ""
    deadline_s: int | None = None
    restarts: int = 0  # the pod's restartCount while this container ran
    last_term: dict[str, Any] | None = None  # the pod's lastState.terminated while it ran
    extra: dict[str, Any] = field(default_factory=dict)

    def term(self) -> dict[str, Any] | None:
        if self.reason is None or self.finished is None:
            return None
        return KO.terminated(self.cid, int(self.code or 0), self.reason, self.started, self.finished)


class KubeWriter(RunWriter):
    """Writes one job's Kubernetes flavour (extends the Slurm writer's console and kernel parts)."""

    def __init__(self, tl: Timeline, seed: int, job_index: int = 0, wild: WildJob = PLAIN):
        # several pods per node: the writer sees every node as pods of fewer GPUs (same ranks,
        # same hosts); the steps are replayed from the real timeline
        real = tl
        if wild.pods_per_node > 1:
            tl = pod_view(tl, wild.pods_per_node)
        super().__init__(tl, seed, job_index, wild)
        if tl is not real:
            self.steps = real.steps()
        self.job = tl.config.name
        self.ids = KO.Ids(self.ctx, tl.t_start)
        self.events = KO.EventLog(self.ids)
        self.runs: list[list[Run]] = []
        self.jobs: list[PyJob] = []
        self.pulled: set[str] = set()  # nodes that have the image
        self.rng = self.ctx.rng("k8s")
        self._planned = False

    # ------------------------------------------------------------------ names and small helpers
    def pod_name(self, ni: int) -> tuple[str, str, int]:
        if ni == 0:
            return f"{self.job}-master-0", "master", 0
        return f"{self.job}-worker-{ni - 1}", "worker", ni - 1

    def pod_of(self, ni: int | None) -> str | None:
        return self.pod_name(ni)[0] if ni is not None else None

    def fail_index(self, a: Attempt, inc: Incident) -> int | None:
        """The pod (index) of the failure: the failed rank's when pods share nodes."""
        if inc.node is None:
            return None
        if self.ctx.wild.pods_per_node > 1 and inc.rank is not None:
            return inc.rank // self.tl.config.gpus_per_node
        return a.nodes.index(inc.node)

    def _u(self, lo: float, hi: float) -> int:
        return int(round(float(self.rng.uniform(lo, hi)) * US))

    def _pref(self, pod: Pod, t: int, container: bool = False) -> dict[str, Any]:
        return KO.pod_ref(pod.name, pod.uid, self.ids.rv(t), container)

    def _jref(self, job: PyJob, t: int) -> dict[str, Any]:
        return KO.job_ref(self.job, job.uid, self.ids.rv(t))

    def _op(self, t: int, job: PyJob, reason: str, message: str, etype: str = "Normal") -> None:
        self.events.core(t, self._jref(job, t), Note(reason, message, etype), Source(KO.OPERATOR))

    def _kubelet(self, t: int, pod: Pod, note: Note, container: bool = True, seen: Seen = KO.ONCE) -> None:
        self.events.core(t, self._pref(pod, t, container), note, Source(host=pod.node), seen)

    def _cluster_nodes(self) -> int:
        return len(self.tl.hosts) + 3  # GPU nodes and three control-plane nodes

    def _unschedulable(self, busy: int, cordoned: int = 0) -> str:
        total = self._cluster_nodes()
        why = ["3 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }"]
        if busy:
            why.append(f"{busy} Insufficient nvidia.com/gpu")
        if cordoned:
            why.append(f"{cordoned} node(s) were unschedulable")
        pre = ["3 Preemption is not helpful for scheduling"]
        if busy + cordoned:
            pre.append(f"{busy + cordoned} No preemption victims found for incoming pod")
        return (f"0/{total} nodes are available: {', '.join(sorted(why))}. preemption: 0/{total} nodes are "
                f"available: {', '.join(sorted(pre))}..")

    # ------------------------------------------------------------------ the plan
    def plan(self) -> None:
        if self._planned:
            return
        self._planned = True
        tl = self.tl
        job0 = PyJob(self.ids.uid("pytorchjob", 0), self._submit[0], 0)
        self._create_job(job0)
        prev: list[Run] | None = None
        for k, a in enumerate(tl.attempts):
            inc = tl.incidents[a.incident] if a.incident is not None else None
            nxt = tl.attempts[k + 1] if k + 1 < len(tl.attempts) else None
            job = self.jobs[-1]
            runs = [self._start(k, a, ni, prev[ni] if prev else None, job) for ni in range(len(a.nodes))]
            self._end(k, a, inc, nxt, runs)
            self.runs.append(runs)
            prev = runs

    def _create_job(self, job: PyJob) -> None:
        self.jobs.append(job)
        t = job.created
        self._op(t + 150_000, job, "PyTorchJobCreated", f"PyTorchJob {self.job} is created.")
        for ni in range(self.tl.config.nodes):
            name = self.pod_name(ni)[0]
            self._op(t + 400_000 + ni * 9_000, job, "SuccessfulCreateService", f"Created service: {name}")

    def _start(self, k: int, a: Attempt, ni: int, prev: Run | None, job: PyJob) -> Run:
        t_run = a.start + ni * 20_000
        if prev is not None and prev.end == "inplace":
            pod, cid = self._restart_in_place(prev, t_run)
        else:
            pod, cid = self._new_pod(k, a, ni, prev, job, t_run)
        self._kubelet(t_run - 200_000, pod, Note("Created", f"Created container {KO.CONTAINER}"))
        self._kubelet(t_run, pod, Note("Started", f"Started container {KO.CONTAINER}"))
        run = Run(pod, t_run, cid, restarts=pod.restarts, last_term=pod.last_term)
        if self.tl.config.walltime_s:
            # the time limit counts from the container's start: the cluster's time-limit controller sets
            # the pod's activeDeadlineSeconds (a mutable field) to it at every (re)start
            run.deadline_s = int(-(-(a.start - pod.start_time + int(self.tl.config.walltime_s * US)) // US))
        return run

    def _restart_in_place(self, prev: Run, t_run: int) -> tuple[Pod, str]:
        """The same pod, its container restarted by the kubelet after its back-off: (pod, container id)."""
        pod = prev.pod
        gap = t_run - (prev.finished or t_run)
        if gap > 12 * US:
            first = (prev.finished or t_run) + US
            n = max(1, int(gap // (25 * US)))
            self._kubelet(t_run - 2 * US, pod, Note(
                "BackOff", f"Back-off restarting failed container {KO.CONTAINER} in pod {pod.name}_{NS}({pod.uid})",
                "Warning"), seen=Seen(n, first=first))
        pod.restarts += 1
        pod.last_term = prev.term()
        return pod, prev.restart_cid

    def _pod_created(self, k: int, a: Attempt, ni: int, prev: Run | None, job: PyJob, t_run: int) -> int:
        """When the operator creates attempt ``k``'s pod ``ni``: after a new PyTorchJob, once a lost
        node's pod is force-deleted, or once the previous pod is gone."""
        if prev is None and k == 0:
            created = job.created + US + ni * 30_000
        elif prev is not None and prev.pod.job is not job:
            created = job.created + US + ni * 30_000
        elif prev is not None and prev.end == "lost":
            created = (prev.deleted or a.start) + 40 * US + ni * 30_000  # force-deleted once the grace ran out
        else:
            gone = max(x for x in (prev.deleted, prev.finished, 0) if x is not None) if prev else a.start
            created = gone + 600_000 + ni * 30_000
        return min(created, t_run - 3 * US)

    def _new_pod(self, k: int, a: Attempt, ni: int, prev: Run | None, job: PyJob, t_run: int) -> tuple[Pod, str]:
        """A new pod object: created by the operator, placed by the scheduler, image pulled: (pod,
        container id)."""
        host = a.nodes[ni]
        name, rtype, rindex = self.pod_name(ni)
        created = self._pod_created(k, a, ni, prev, job, t_run)
        pull = 0 if host in self.pulled else self._u(35.0, 150.0)
        sched = max(created + 200_000, t_run - pull - 2 * US)
        uid = self.ids.uid("pod", k, ni)
        pod = Pod(name, ni, rtype, rindex, uid, host, created, sched, sched + 400_000,
                  f"10.244.{self.tl.hosts.index(host) + 1}.{(k * 7 + ni) % 250 + 2}", job)
        self._op(created, job, "SuccessfulCreatePod", f"Created pod: {name}")
        wait = sched - created
        if wait > 3 * US:
            # every GPU node is taken while it waits, but a cordoned one
            cordoned = 1 if (prev is not None and prev.extra.get("cordoned")) else 0
            self.events.new(created + 100_000, self._pref(pod, created),
                            Note("FailedScheduling", self._unschedulable(len(self.tl.hosts) - cordoned, cordoned),
                                 "Warning"), "Scheduling",
                            Seen(max(1, int(wait // (60 * US)) + 1), last=sched - US))
        self.events.new(sched, self._pref(pod, sched),
                        Note("Scheduled", f"Successfully assigned {NS}/{name} to {host}"), "Binding")
        self._image_events(pod, sched, t_run)
        return pod, self.ids.hex64("cid", pod.uid, 0)

    def _image_events(self, pod: Pod, sched: int, t_run: int) -> None:
        """The image is pulled once per node; later pods there find it present."""
        if pod.node in self.pulled:
            self._kubelet(t_run - 600_000, pod, Note("Pulled",
                                                     f'Container image "{KO.IMAGE}" already present on machine'))
            return
        self._kubelet(sched + 500_000, pod, Note("Pulling", f'Pulling image "{KO.IMAGE}"'))
        took = fmt_go_ms(max(1, (t_run - 700_000 - sched - 500_000) // 1000))
        self._kubelet(t_run - 700_000, pod, Note(
            "Pulled", f'Successfully pulled image "{KO.IMAGE}" in {took} ({took} including waiting)'))
        self.pulled.add(pod.node)

    def _exit(self, run: Run, t: int, reason: str, code: int) -> None:
        run.reason, run.code, run.finished = reason, code, t
        self._op(t + 300_000, run.pod.job, "ExitedWithCode",
                 f"Pod: {NS}.{run.pod.name} exited with code {code}")

    def _delete(self, run: Run, t: int, killing: bool = True) -> None:
        """Graceful deletion: SIGTERM, the container exits 143, the pod goes."""
        if killing:
            self._kubelet(t + 20_000, run.pod, Note("Killing", f"Stopping container {KO.CONTAINER}"))
        self._exit(run, t + self._u(0.8, 4.0), "Error", SIGTERM_EXIT)
        run.end, run.deleted = "deleted", t

    def _end(self, k: int, a: Attempt, inc: Incident | None, nxt: Attempt | None, runs: list[Run]) -> None:
        job = self.jobs[-1]
        if inc is None:
            self._completed(a, runs, job)
            return
        cls, td = inc.root_cause, inc.t_detected
        fail_ni = self.fail_index(a, inc)
        if inc.killed_by_walltime or cls == "walltime":
            self._deadline(td, nxt, runs, job)
        elif cls == "preemption":
            self._preempted(k, td, runs)
        elif cls == "maintenance":
            self._maintenance(a, td, nxt, runs)
        elif cls in ("hang", "numerics", "user_cancel"):
            for run in runs:
                self._delete(run, td)
            if cls == "user_cancel" and nxt is not None:  # the job is deleted and submitted again
                self._create_job(PyJob(self.ids.uid("pytorchjob", k + 1), self._submit[k + 1], k + 1))
        elif cls in NODE_LOST:
            assert fail_ni is not None  # a lost node is always named
            self._node_lost(inc, [r for r in runs if r.pod.node == runs[fail_ni].pod.node], runs)
        elif cls in CONTAINER_FAILS:
            replaced = nxt is not None and fail_ni is not None and nxt.nodes[fail_ni] != a.nodes[fail_ni]
            self._container_failed(cls, td, fail_ni, replaced, runs)
        else:  # pragma: no cover - every simulated class is handled above
            raise ValueError(f"no Kubernetes evidence for {cls!r}")
        self._after_failure(td, nxt, runs, job)

    def _completed(self, a: Attempt, runs: list[Run], job: PyJob) -> None:
        """The workers finish a little before the master, then the job succeeds."""
        for run in runs[1:]:
            self._exit(run, a.end - self._u(0.2, 0.9), "Completed", 0)
        self._exit(runs[0], a.end, "Completed", 0)
        self._op(a.end + 600_000, job, "PyTorchJobSucceeded", f"PyTorchJob {self.job} is successfully completed.")

    def _deadline(self, td: int, nxt: Attempt | None, runs: list[Run], job: PyJob) -> None:
        """The time limit: every pod passes its activeDeadlineSeconds and is deleted."""
        why = "Pod was active on the node longer than the specified deadline"
        for run in runs:
            self._kubelet(td, run.pod, Note("DeadlineExceeded", why), container=False)
            run.pod_reason = ("DeadlineExceeded", why)
            self._delete(run, td)
        last = max(r.finished or td for r in runs)
        for rtype, n in (("Master", 1), ("Worker", len(runs) - 1)):
            if n and nxt is not None:
                self._op(last + US, job, "PyTorchJobRestarting",
                         f"PyTorchJob {self.job} is restarting because {n} {rtype} replica(s) failed.", "Warning")
        for run in runs:
            run.deleted = last + 1_500_000
            self._op(run.deleted, job, "SuccessfulDeletePod", f"Deleted pod: {run.pod.name}")

    def _preempted(self, k: int, td: int, runs: list[Run]) -> None:
        """A higher-priority serving pod preempts every pod of the job."""
        other = self.ids.uid("preemptor", k)
        for run in runs:
            self.events.new(td, self._pref(run.pod, td),
                            Note("Preempted", f"Preempted by pod {other} on node {run.pod.node}"), "Preempting",
                            related={"apiVersion": "v1", "kind": "Pod", "name": f"llm-serving-{k:02d}-0",
                                     "namespace": "serving", "uid": other})
            run.disruption = ("PreemptionByScheduler",
                              f"{KO.SCHEDULER}: preempting to accommodate a higher priority pod", td)
            self._delete(run, td)

    def _maintenance(self, a: Attempt, td: int, nxt: Attempt | None, runs: list[Run]) -> None:
        """The head node is cordoned and drained; it comes back before the next attempt."""
        head = a.nodes[0]
        self.events.core(td - 300 * US, KO.node_ref(head),
                         Note("NodeNotSchedulable", f"Node {head} status is now: NodeNotSchedulable"),
                         Source(host=head))
        for run in runs:
            run.disruption = ("EvictionByEvictionAPI", "Eviction API: evicting", td)
            run.extra["cordoned"] = True
            self._delete(run, td)
        if nxt is not None:
            back = max(td + US, nxt.start - self._u(20.0, 60.0))
            self.events.core(back, KO.node_ref(head),
                             Note("NodeSchedulable", f"Node {head} status is now: NodeSchedulable"),
                             Source(host=head))

    def _node_lost(self, inc: Incident, lost_runs: list[Run], runs: list[Run]) -> None:
        """The node goes NotReady, the taint manager deletes its pods, the others' containers fail."""
        te, td = inc.t_fail, inc.t_detected
        t_nr = te + (td - te) // 2
        node = lost_runs[0].pod.node
        self.events.core(t_nr, KO.node_ref(node),
                         Note("NodeNotReady", f"Node {node} status is now: NodeNotReady"),
                         Source("node-controller"))
        for lost in lost_runs:
            self.events.core(t_nr + 50_000, self._pref(lost.pod, t_nr), Note("NodeNotReady", "Node is not ready",
                             "Warning"), Source("node-controller"))
            self.events.core(td, self._pref(lost.pod, td),
                             Note("TaintManagerEviction", f"Marking for deletion Pod {NS}/{lost.pod.name}"),
                             Source("taint-eviction-controller"))
            lost.not_ready = t_nr
            lost.disruption = ("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint", td)
            lost.end, lost.deleted = "lost", td
        for run in runs:
            if all(run is not x for x in lost_runs):
                self._exit(run, td + self._u(1.0, 5.0), "Error", 1)
                run.end = "inplace"

    def _container_failed(self, cls: str, td: int, fail_ni: int | None, replaced: bool, runs: list[Run]) -> None:
        """Every container fails and restarts in place; a node to replace is cordoned and its pod evicted."""
        for run in runs:
            if run.pod.ni == fail_ni:
                if cls == "oom_host":
                    # the reason wins: containerd may report an OOM-killed container with exit code 0
                    self._exit(run, td + 100_000, "OOMKilled", 137 if self.rng.random() < 0.7 else 0)
                else:
                    self._exit(run, td + 100_000, "Error", 1)
            else:
                self._exit(run, td + self._u(0.3, 3.0), "Error", 1)
            run.end = "inplace"
        if replaced and cls in REPLACES_NODE and fail_ni is not None:
            node = runs[fail_ni].pod.node
            self.events.core(td + 2 * US, KO.node_ref(node),
                             Note("NodeNotSchedulable", f"Node {node} status is now: NodeNotSchedulable"),
                             Source(host=node))
            for bad in runs:  # every pod on the cordoned node is evicted
                if bad.pod.node == node:
                    bad.disruption = ("EvictionByEvictionAPI", "Eviction API: evicting", td + 5 * US)
                    bad.extra["cordoned"] = True
                    bad.end, bad.deleted = "deleted", td + 5 * US

    def _after_failure(self, td: int, nxt: Attempt | None, runs: list[Run], job: PyJob) -> None:
        """The job fails for good after the last attempt; otherwise in-place containers restart."""
        if nxt is None:
            self._op(max(r.finished or td for r in runs) + US, job, "PyTorchJobFailed",
                     f"PyTorchJob {self.job} has failed because it has reached the specified backoff limit", "Warning")
            for run in runs:
                run.end = "final" if run.end == "inplace" else run.end
            return
        for run in runs:
            if run.end == "inplace":
                run.restart = nxt.start + run.pod.ni * 20_000
                run.restart_cid = self.ids.hex64("cid", run.pod.uid, run.pod.restarts + 1)

    # ------------------------------------------------------------------ documents
    def pod_yaml(self, k: int, run: Run) -> dict[str, Any]:
        pod = run.pod
        meta = self._pod_meta(pod)
        spec = self._pod_spec(run)
        cs: dict[str, Any] = {
            "image": KO.IMAGE,
            "imageID": f"{KO.IMAGE.split(':')[0]}@{KO.IMAGE_DIGEST}",
            "name": KO.CONTAINER,
        }
        conds = [
            KO.condition("Initialized", True, pod.start_time),
            KO.condition("PodScheduled", True, pod.scheduled),
        ]
        status: dict[str, Any] = {"hostIP": self.ctx.ip(pod.node), "hostIPs": [{"ip": self.ctx.ip(pod.node)}],
                                  "podIP": pod.ip, "podIPs": [{"ip": pod.ip}], "qosClass": "Guaranteed",
                                  "startTime": ts(pod.start_time)}
        state, more_conds, status["phase"], when = self._container_state(run)
        cs.update(state)
        conds += more_conds
        if run.disruption is not None:
            reason, message, t = run.disruption
            conds.append(KO.condition("DisruptionTarget", True, t, reason, message))
        if run.end in ("deleted", "lost") and run.deleted is not None:
            meta["deletionGracePeriodSeconds"] = 30
            meta["deletionTimestamp"] = ts(run.deleted + 30 * US)
        if run.pod_reason is not None:
            status["reason"], status["message"] = run.pod_reason
        status["conditions"] = conds
        status["containerStatuses"] = [cs]
        meta["resourceVersion"] = self.ids.rv(when)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}

    def _pod_meta(self, pod: Pod) -> dict[str, Any]:
        return {
            "creationTimestamp": ts(pod.created),
            "labels": KO.labels(self.job, pod.rtype, pod.rindex),
            "name": pod.name,
            "namespace": NS,
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "blockOwnerDeletion": True, "controller": True,
                                 "kind": "PyTorchJob", "name": self.job, "uid": pod.job.uid}],
            "uid": pod.uid,
        }

    def _pod_spec(self, run: Run) -> dict[str, Any]:
        pod, cfg = run.pod, self.tl.config
        spec: dict[str, Any] = {
            "containers": [KO.container_spec(self.job, cfg.nodes, cfg.gpus_per_node, pod.ni)],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "hostname": pod.name,
            "nodeName": pod.node,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": "OnFailure",
            "schedulerName": KO.SCHEDULER,
            "securityContext": {},
            "serviceAccount": "default",
            "serviceAccountName": "default",
            "subdomain": self.job,
            "terminationGracePeriodSeconds": 30,
            "tolerations": KO.TOLERATIONS,
            "volumes": KO.VOLUMES,
        }
        if run.deadline_s is not None:
            spec["activeDeadlineSeconds"] = run.deadline_s
        return spec

    def _container_state(self, run: Run) -> tuple[dict[str, Any], list[dict[str, Any]], str, int]:
        """The container's status fields, the Ready conditions, the pod's phase and the time the
        snapshot shows: restarted in place (running again), on a lost node (still running as far as
        the API knows), or stopped."""
        if run.end == "inplace" and run.restart is not None:
            t_ready = run.restart + US
            state = dict(containerID=f"containerd://{run.restart_cid}", lastState={"terminated": run.term()},
                         ready=True, restartCount=run.restarts + 1, started=True,
                         state={"running": {"startedAt": ts(run.restart)}})
            conds = [KO.condition("Ready", True, t_ready), KO.condition("ContainersReady", True, t_ready)]
            return state, conds, "Running", t_ready
        last_state = {"terminated": run.last_term} if run.last_term else {}
        if run.end == "lost":
            state = dict(containerID=f"containerd://{run.cid}", lastState=last_state,
                         ready=True, restartCount=run.restarts, started=True,
                         state={"running": {"startedAt": ts(run.started)}})
            conds = [KO.condition("Ready", False, run.not_ready or run.started),
                     KO.condition("ContainersReady", True, run.started + US)]
            return state, conds, "Running", run.deleted or run.started
        term = run.term()
        state = dict(containerID=f"containerd://{run.cid}", lastState=last_state,
                     ready=False, restartCount=run.restarts, started=False,
                     state={"terminated": term} if term else {"waiting": {"reason": "ContainerCreating"}})
        t_end = run.finished or run.started
        done = run.reason == "Completed"
        why = "PodCompleted" if done else "PodFailed"
        conds = [KO.condition("Ready", False, t_end, why), KO.condition("ContainersReady", False, t_end, why)]
        return state, conds, "Succeeded" if done else ("Failed" if run.end == "deleted" else "Running"), t_end

    def job_yaml(self) -> dict[str, Any]:
        cfg, tl = self.tl.config, self.tl
        job = self.jobs[-1]
        last = tl.attempts[-1]
        ok = last.incident is None
        end = last.end + 600_000 if ok else last.end + US
        return {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"creationTimestamp": ts(job.created), "generation": 1, "name": self.job, "namespace": NS,
                         "resourceVersion": self.ids.rv(end), "uid": job.uid},
            "spec": {"pytorchReplicaSpecs": self._replica_specs(),
                     "runPolicy": {"backoffLimit": max(0, cfg.max_attempts - 1), "cleanPodPolicy": "None",
                                   "suspend": False}},
            "status": {"completionTime": ts(end), "conditions": self._job_conditions(job, last, ok, end),
                       "lastReconcileTime": ts(end), "replicaStatuses": self._replica_statuses(ok),
                       "startTime": ts(job.created + US)},
        }

    def _replica_specs(self) -> dict[str, Any]:
        """The PyTorchJob's Master and Worker replica specs (one pod template)."""
        cfg = self.tl.config
        template_spec: dict[str, Any] = {
            "containers": [KO.container_spec(self.job, cfg.nodes, cfg.gpus_per_node, None)],
            "tolerations": [KO.TOLERATIONS[-1]],
            "volumes": KO.VOLUMES,
        }
        replicas: dict[str, Any] = {
            "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": template_spec}}
        }
        if cfg.nodes > 1:
            replicas["Worker"] = {"replicas": cfg.nodes - 1, "restartPolicy": "OnFailure",
                                  "template": {"spec": template_spec}}
        return replicas

    def _job_conditions(self, job: PyJob, last: Attempt, ok: bool, end: int) -> list[dict[str, Any]]:
        """Created, Running (no longer), then Succeeded or Failed at ``end``."""
        conds = [
            {"lastTransitionTime": ts(job.created), "lastUpdateTime": ts(job.created),
             "message": f"PyTorchJob {self.job} is created.", "reason": "PyTorchJobCreated", "status": "True",
             "type": "Created"},
            {"lastTransitionTime": ts(last.start + 2 * US), "lastUpdateTime": ts(end),
             "message": f"PyTorchJob {self.job} is running.", "reason": "PyTorchJobRunning", "status": "False",
             "type": "Running"},
        ]
        if ok:
            conds.append({"lastTransitionTime": ts(end), "lastUpdateTime": ts(end),
                          "message": f"PyTorchJob {self.job} is successfully completed.",
                          "reason": "PyTorchJobSucceeded", "status": "True", "type": "Succeeded"})
        else:
            conds.append({"lastTransitionTime": ts(end), "lastUpdateTime": ts(end),
                          "message": f"PyTorchJob {self.job} has failed because it has reached the specified "
                                     f"backoff limit", "reason": "PyTorchJobFailed", "status": "True",
                          "type": "Failed"})
        return conds

    def _replica_statuses(self, ok: bool) -> dict[str, Any]:
        """Each replica type's selector and how many of its pods succeeded or failed."""
        cfg = self.tl.config
        sel = f"training.kubeflow.org/job-name={self.job},training.kubeflow.org/operator-name={KO.OPERATOR}"
        rstat: dict[str, Any] = {"Master": {"selector": f"{sel},training.kubeflow.org/replica-type=master"}}
        key = "succeeded" if ok else "failed"
        rstat["Master"][key] = 1
        if cfg.nodes > 1:
            rstat["Worker"] = {"selector": f"{sel},training.kubeflow.org/replica-type=worker", key: cfg.nodes - 1}
        return rstat

    # ------------------------------------------------------------------ logs
    def evidence(self, a: Attempt) -> Evidence:
        if a.index not in self._ev:
            self.plan()
            inc = self.tl.incidents[a.incident] if a.incident is not None else None
            cg = None
            fi = self.fail_index(a, inc) if inc is not None else None
            if inc is not None and fi is not None:
                run = self.runs[a.index][fi]
                scope = f"cri-containerd-{run.cid}.scope"
                memcg = f"/kubepods.slice/kubepods-pod{run.pod.uid.replace('-', '_')}.slice/{scope}"
                cg = (scope, memcg, memcg)
            self._ev[a.index] = attempt_evidence(self.ctx, a, inc, False, cg)
        return self._ev[a.index]

    def pod_log(self, ni: int) -> Iterator[str]:
        """``kubectl logs`` of one pod name over the run: its node's torchrun, NCCL and Python
        output; the master's also holds rank 0's trainer lines."""
        ctx = self.ctx
        for a in self.tl.attempts:
            if ctx.wild.active:
                yield from self.wild_lines(a, ni)
                continue
            t_l = a.start + min(3 * US, (a.load_begin - a.start) // 10) + ni * 1000
            warn_t = a.start + (a.load_begin - a.start) // 2 + ni * 1000
            ev = self.evidence(a)
            streams: list[Iterable[Line]] = [
                [(t_l, s) for s in launcher_start(ctx, a, ni, t_l)],
                init_chatter(ctx, a, only_node=ni),
                [(warn_t, s) for s in PY_WARNINGS],
                [(t, s) for t, s, node in ev.out if node == ni],
            ]
            if ni == 0:
                streams[1:1] = [TR.banner(ctx, a)]
                streams.insert(4, TR.progress(ctx, a, self.steps.attempt(a.index)))
                if a.incident is None:
                    streams.append(TR.final(ctx, a))
            yield from merged(*streams)

    # ------------------------------------------------------------------ other tenants
    def noise_events(self) -> Iterator[dict[str, Any]]:
        """Another team's CronJob on the CPU nodes (namespace ``research``), every two hours.

        CronJob children are named ``<cronjob>-<scheduled unix minute>``, so their events come
        out already in the List's name order and are streamed, one job at a time.
        """
        rng = self.ctx.rng("k8s-noise")
        hour = 3600 * US
        t = (self.tl.t_start - 1800 * US) // (2 * hour) * (2 * hour)
        end = self.tl.t_end + 1800 * US
        n = 0
        while True:
            t += 2 * hour
            if t >= end:
                return
            n += 1
            log = KO.EventLog(self.ids)
            jname = f"data-prep-{t // (60 * US)}"
            suffix = "".join("bcdfghjklmnpqrstvwxz2456789"[int(i)] for i in rng.integers(0, 27, 5))
            pname = f"{jname}-{suffix}"
            node = f"cpu-{int(rng.integers(1, 40)):03d}"
            t0 = t + int(rng.uniform(0.2, 2.0) * US)
            juid, puid = self.ids.uid("noise-job", n), self.ids.uid("noise-pod", n)
            jref = {"apiVersion": "batch/v1", "kind": "Job", "name": jname, "namespace": "research",
                    "resourceVersion": self.ids.rv(t0), "uid": juid}
            pref = {"apiVersion": "v1", "kind": "Pod", "name": pname, "namespace": "research",
                    "resourceVersion": self.ids.rv(t0), "uid": puid}
            cref = {**pref, "fieldPath": "spec.containers{main}"}
            jobs, kubelet = Source("job-controller"), Source(host=node)
            log.core(t0, jref, Note("SuccessfulCreate", f"Created pod: {pname}"), jobs)
            log.new(t0 + 300_000, pref, Note("Scheduled", f"Successfully assigned research/{pname} to {node}"),
                    "Binding")
            log.core(t0 + 1_200_000, cref,
                     Note("Pulled", 'Container image "python:3.11-slim" already present on machine'), kubelet)
            log.core(t0 + 1_500_000, cref, Note("Created", "Created container main"), kubelet)
            log.core(t0 + 1_700_000, cref, Note("Started", "Started container main"), kubelet)
            done = t0 + int(rng.uniform(120, 1800) * US)
            log.core(done + 800_000, jref, Note("Completed", "Job completed"), jobs)
            yield from log.sorted_items()

    # ------------------------------------------------------------------ all files
    def write(self, out: Path) -> dict[str, int]:
        self.plan()
        sizes: dict[str, int] = {}
        out.mkdir(parents=True, exist_ok=True)
        # namespaces default and ml-train (the job's, held) sort before research (streamed)
        items = itertools.chain(self.events.sorted_items(), self.noise_events())
        sizes["events.json"] = write_text(out / "events.json", list_json_chunks(items))
        spec = self.ctx.wild.size_source == "spec"  # otherwise only logs and events were kept
        if spec:
            sizes["pytorchjob.yaml"] = write_text(out / "pytorchjob.yaml", to_yaml(self.job_yaml()))
        for k, runs in enumerate(self.runs if spec else []):
            for run in runs:
                rel = os.path.join("pods", f"{run.pod.name}.attempt-{k}.yaml")
                sizes[rel] = write_text(out / rel, to_yaml(self.pod_yaml(k, run)))
        for ni in range(self.tl.config.nodes):
            rel = os.path.join("logs", f"{self.pod_name(ni)[0]}.log")
            sizes[rel] = write_lines(out / rel, self.pod_log(ni))
        for h in self.used_hosts():
            rel = os.path.join("nodes", h, KERNEL_FILE[self.ctx.wild.kernel])
            sizes[rel] = write_lines(out / rel, self.kern(h))
        return sizes


def write_text(path: Path, text: str | Iterable[str]) -> int:
    """Write a text, or its pieces one after the other; returns its length."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for piece in [text] if isinstance(text, str) else text:
            fh.write(piece)
            n += len(piece)
    return n


def fmt_go_ms(ms: int) -> str:
    """A duration as Go prints ``time.Duration`` truncated to milliseconds: 1m32.405s, 850ms."""
    if ms < 1000:
        return f"{ms}ms"
    h, rem = divmod(ms, 3_600_000)
    m, rem = divmod(rem, 60_000)
    s, frac = divmod(rem, 1000)
    sec = f"{s}.{frac:03d}".rstrip("0").rstrip(".") + "s"
    if h:
        return f"{h}h{m}m{sec}"
    if m:
        return f"{m}m{sec}"
    return sec


def write_kubernetes(w: RunWriter, out: Path) -> dict[str, int]:
    """Entry point used by ``run_simulation``."""
    return KubeWriter(w.tl, w.ctx.seed, w.ctx.job_index).write(out)


__all__ = ["KubeWriter", "write_kubernetes", "fmt", "US"]
