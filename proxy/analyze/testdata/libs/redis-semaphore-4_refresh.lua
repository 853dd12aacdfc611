
  local key = KEYS[1]
  local identifier = ARGV[1]
  local lockTimeout = ARGV[2]

  local value = redis.call('get', key)

  if value == identifier then
    redis.call('pexpire', key, lockTimeout)
    return 1
  elseif value == false then
    redis.call('set', key, identifier)
    redis.call('pexpire', key, lockTimeout)
    return 1
  end

  return 0
  