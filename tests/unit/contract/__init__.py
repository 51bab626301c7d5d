"""The contract between brokers and operator (kafkube_contract): golden documents as each
kafkube version writes them, read by today's readers, and the import rules that keep the
contract the only thing the two share. The same with a real API server is
tests/integration/test_contract_compat.py."""
