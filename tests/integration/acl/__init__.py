"""ACLs against real brokers: the ACL admin APIs, the data plane, and every family of
group and admin APIs."""
