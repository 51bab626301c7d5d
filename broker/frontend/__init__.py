"""The front end: the socket server that accepts client connections, reads and decodes
requests and hands them to the handlers, in order per connection (Kafka's SocketServer and
request channel)."""
