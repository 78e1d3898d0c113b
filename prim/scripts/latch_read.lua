-- Reads a countdown latch's generation and count on the primary: a script
-- is never routed to a replica, whatever the client's read routing (Cluster
-- ReadOnly, RouteByLatency, RouteRandomly), so a lagging replica cannot
-- answer a read that prim acts on or returns.
-- KEYS[1]: the latch hash. Returns {gen, count} (false for a missing field).
return redis.call('HMGET', KEYS[1], 'gen', 'count')
