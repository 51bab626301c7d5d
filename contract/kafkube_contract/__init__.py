"""The contract between kafkube's brokers and its operator: what each writes that the other
reads, in one package both import, so that neither imports the other.

A broker and an operator are two deployables. During every upgrade one of them runs a newer
kafkube than the other, and they still meet in the same Kubernetes objects: the cluster-image
ConfigMap (``<cluster>-metadata``), the brokers' and the controller's Leases, the
``server.properties`` the operator renders for the brokers, and the rule for leader
imbalance both apply. Those are this package:

* ``objects``: the Kubernetes objects the cluster lives in (names, labels, annotation keys)
  and pure readers of them (a stored image's identity and document, a broker registration
  from its Lease);
* ``image``: the image document's values (partitions, topics), its codec and format, and
  the operator's read model of it (``ImageView``);
* ``leases``: when a reader takes a Lease for lapsed (``RenewalClock``: by when it saw the
  renewal, on its own clock, never by the holder's ``renewTime``);
* ``registration``: a broker registration (``BrokerRegistration``);
* ``config_keys``, ``broker_keys`` and ``properties``: the configuration keys the brokers
  accept, with Kafka's names, types and defaults, and the ``server.properties`` syntax;
* ``leadership``: which partitions are off their preferred leader enough to move.

The rules, for contract version ``CONTRACT_VERSION``:

1. Within a contract version, changes are additive: a key, an annotation or a field may be
   added, never renamed, removed or given another meaning.
2. A reader ignores the keys and fields it does not know, and gives the optional ones it
   misses their defaults: a newer writer's additions do not break an older reader, and an
   older writer's documents read as they did.
3. A document that says it is in a format newer than the reader knows (the image's
   ``format``, ``kafkube_contract.image.IMAGE_FORMAT``) is refused with a message saying
   so, never half understood. A change that rule 1 does not allow is a new format, and a
   new contract version. Brokers from before the contract (commit 4cc1e25 and older) do
   not know the ``format`` key and would read a format 2 image as format 1: format 2 must
   not be written while any such broker runs. A broker whose own copy of the image (in its
   log dir) is of a newer format, after a downgrade, does not start.
4. A writer keeps what it does not know: a broker that reads the image and writes it back
   carries the keys it does not know, at the top, in topics and in partitions, as it read
   them (``extra``), so an older controller during a rolling upgrade does not wipe a newer
   broker's additions. It carries them blind, though: a key whose meaning is tied to
   others (an ELR tied to the ISR, say) would be stale once an older writer changed those.
   Such a key is written only once a finalized feature level (the image's ``features``, as
   Kafka's ``metadata.version``) says every broker knows it; a broker does not raise that
   level until every registered broker supports it.

The package imports the standard library and the ``kubernetes`` client only: not the
broker, the operator, the command line, kopf or kafka-python
(tests/unit/contract/test_contract_imports.py). Tests of what a document written before or
after this code looks like are in tests/unit/contract/ and
tests/integration/test_contract_compat.py.
"""

#: Bumped with a change a reader of the previous version could misread (rule 3).
CONTRACT_VERSION = 1
