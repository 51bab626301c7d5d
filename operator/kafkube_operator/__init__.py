"""The kafkube operator (kopf), imported as ``kafkube_operator``: its folder is operator/, a
name that as a package would shadow Python's standard-library ``operator`` module.

``model/`` holds what a cluster should look like, as pure functions of a resource's spec,
tested without a cluster; the handlers that apply it stay thin."""
