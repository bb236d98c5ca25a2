-- Launch code that counts its calls, for the GPU tests' attacks that behave in verify and
-- cheat once timed (test_sampled_proofs, test_check_rows, test_trust5_exact):
--   local counting_launch = dofile(here .. "/counting_launch.lua")
--   cand.launch = counting_launch(tk, opts, body)
-- body runs with `timed` 0 on each call verify makes (km.judge.verify's trial_count for task
-- tk under opts), then 1, 2, ... on the timed calls (a timing whose first call is verify's
-- last makes no warm-up call of its own); it sees k, io and s as launch code does.
local trial_count = require("km.judge.verify").trial_count

return function(tk, opts, body)
  local verify_calls = trial_count(tk, opts)
  return ("local calls = 0\nreturn function(k, io, s)\n  calls = calls + 1\n" ..
    "  local timed = calls > %d and calls - %d or 0\n%s\nend"):format(verify_calls, verify_calls, body)
end
