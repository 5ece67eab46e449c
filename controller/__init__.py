"""kueue-nats: turns MasterQueues and pools' resource reports into Kueue ResourceFlavors and ClusterQueues.

Layers (upper may import lower only):

- ``cli``        typer commands ``render`` (offline) and ``run``;
- ``runner``     the loop: MasterQueue watch, ticks, diff against what was applied, status, events;
- ``kube``       the Kubernetes seam (``KubeApi`` protocol, lightkube implementation);
  ``listening``  the NATS seam (shared subscriptions, Describe at start, report store);
  ``render``     offline rendering for the CLI;
- ``reconcile``  pure: (MasterQueue, reports, Kueue version, now) → desired objects;
- ``model``, ``quantity``  pure data and arithmetic.

``reconcile``, ``model`` and ``quantity`` do no I/O and read no clock.
"""
