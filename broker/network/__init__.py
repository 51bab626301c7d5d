"""Connections this broker opens to other brokers (replica fetches, transaction markers, the
KIP-890 check): a Kafka client connection and the channels to each peer. The connections
clients open to this broker are the front end's (broker/frontend)."""
