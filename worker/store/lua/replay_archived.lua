#!lua
--[[ Re-add a job that only the archive still holds (jobs:dead was trimmed of it).

KEYS[1]  jobs      stream
KEYS[2]  outcomes  hash replay:<batch> (dead id -> JSON outcome)
KEYS[3]  log       stream jobs:dead:log
ARGV[1]  dead_id   the archived dead entry
ARGV[2]  batch     replay batch id
ARGV[3]  ttl_s     expiry of the outcomes hash, seconds
ARGV[4]  queued    the status recorded until the worker runs the job
                   (worker.vocabulary.RECORDED_QUEUED)
ARGV[5]  at        when, ISO-8601 UTC
ARGV[6..] the job's field, value pairs, built from the archived fields by the caller
          (error fields dropped, attempts 0, replay_of, replay_batch)

Returns: the new entry id on `jobs`.
The caller runs this inside the PostgreSQL transaction that marked the row
`replayed` (UPDATE ... WHERE status = 'dead', so no one else takes it). The
`replayed` record added here marks the row again if that transaction's commit
is lost after this script ran: the job is never re-added with its row still
`dead`, which would let a second replay add it twice.
]]
local job = {}
for i = 6, #ARGV do
  job[#job + 1] = ARGV[i]
end
local new_id = redis.call('XADD', KEYS[1], '*', unpack(job))
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode({status = ARGV[4], new_id = new_id}))
redis.call('EXPIRE', KEYS[2], ARGV[3])
redis.call('XADD', KEYS[3], '*', 'event', 'replayed', 'dead_id', ARGV[1], 'batch', ARGV[2], 'new_id', new_id,
           'at', ARGV[5])
return new_id
