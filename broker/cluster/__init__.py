"""Cluster metadata and the coordination backends that store it (docs/broker.md, "The cluster").

``image`` is the model every broker and the controller share: topics, partition replicas,
leaders, leader epochs and ISRs, as one versioned document. ``backend`` is the interface to
where that document, the controller lease and the broker liveness leases live; ``sqlite``
is the embedded implementation, the Kubernetes one comes later behind the same interface.
"""
