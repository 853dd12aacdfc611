
local lockKey = KEYS[1]
local lockValue, timeout = ARGV[1], ARGV[2]

if timeout ~= nil and timeout ~= false and timeout ~= "" then
  return redis.call("SET", lockKey, lockValue, "NX", "PX", timeout)
end

return redis.call("SET", lockKey, lockValue, "NX")
