"""The broker's configuration: the checked configuration (``broker_config``) over the key
table, its parsing and the server.properties syntax of the contract
(``kafkube_contract.config_keys``, ``broker_keys``, ``properties``, shared with the
operator), and the listeners it describes (``listeners``). The lowest layer of the broker:
every other one reads it, it reads none of them."""
