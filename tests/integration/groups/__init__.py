"""Consumer groups end to end: real clients against broker processes (issue #3).

Consumers run in processes of their own, so that one can be killed with SIGKILL. Their
driver is consumer_driver.py (``python -m tests.integration.groups.consumer_driver consume
...``): it subscribes with confluent-kafka (librdkafka) or kafka-python, commits
synchronously after every batch and prints one JSON line per event (assignment change,
records read, offsets committed), which ``ConsumerProc`` (group_clients.py) collects with the
time each line arrived. The Java consumer is KafkaCheck's
``consume --group`` (tests/clients/java), observed through the broker (DescribeGroups).

What is shown: members share the partitions (librdkafka, kafka-python, Java); a SIGKILLed
member's partitions are taken over within session.timeout.ms plus a margin, with only its
uncommitted tail read twice; cooperative-sticky rebalances incrementally; consumers resume
at the committed offset, also after a broker restart (clean or SIGKILL), and a live group
rides out a broker crash; a restarted static member keeps its partitions and the
generation; bad group requests get Kafka's error codes and the broker keeps serving.

Every broker runs with ``group.initial.rebalance.delay.ms=0``. Kafka's default (3 s) makes
the first rebalance of an Empty group wait for more members to arrive; that is a production
setting to avoid a rebalance per joining member, and in tests it would only add 3 s to each
new group and blur the measured takeover time.
"""
