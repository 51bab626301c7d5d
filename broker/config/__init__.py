"""The broker's configuration, Kafka's keys and defaults: the key table and its parsing
(``keys``), server.properties files (``properties_file``), the checked configuration
(``broker_config``) and the listeners it describes (``listeners``). The lowest layer: every
other one reads it, it reads none of them."""
