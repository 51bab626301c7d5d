"""The `kafkube` command: the one entry point above the broker (broker/) and the operator
(operator/, imported as kafkube_operator). Each subcommand imports only its side, so a broker
installed without the operator's extra runs `kafkube broker` and `kafkube dev`."""
