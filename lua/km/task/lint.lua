-- km.task.lint — can a task tell a right kernel from a wrong one? (DESIGN.md, "Tasks can be wrong
-- too"; docs/tasks.md, "Linting tasks")
--
--   local lint = require "km.task.lint"
--   local res = lint.run(t, { backend = lint.backend() })   -- one task at its precision
--   res.flags        -- { { reason, shape, output, detail }, ... }; empty: nothing found
--   res.unchecked    -- { "what could not be checked here, and why", ... }
--   lint.cached(t)   -- the last result kept for this task (content, precision, torch), or nil
--   tasks = lint.gate(tasks, { allow = false, skip = true, who = "kmrun sweep" })
--
-- For every shape set, the reference runs twice on one seed and once on another; its outputs
-- and trivial candidates (zeros, a constant at the output's mean, an input passed through,
-- the reference on other inputs) go through the judge's comparison (km.compare, atol + rtol
-- of the task's tolerance, NaN never passes). Trivial candidates are judged on outputs of at
-- least MIN_ELEMENTS elements, on outputs smaller than that at every shape set (a loss, a
-- statistic) and on every output at the timed shape (shape set 1); on an output under
-- MIN_ELEMENTS the constant is the other seed's mean (a 1-element output equals its own).
-- An output without a row per input row is also estimated from a sample of the inputs' rows
-- (sample_estimate), at every size. An output under MIN_ELEMENTS at the timed shape
-- is run there on CLOSED_FORM_SEEDS and flagged closed_form where a constant would pass a
-- trial with a probability above CLOSED_FORM_P. A task that declares check_rows has its
-- reference run on the first rows // ROWS_RATIO of them, repeated, at every shape set, and is
-- flagged rows_false where its outputs are not those rows' outputs repeated. The trivial candidates, the sample
-- estimate and the closed form flag where they hold at the timed shape, whose speed a verdict
-- reports (AT_TIMED). With a GPU the
-- judge's own path runs the reference (km.judge: inputs made on the GPU) and times it on the
-- timed shape; without one a PyTorch reference runs on the CPU (km.task.kernelbench, host
-- memory), and what could not be checked is said: CUDA-only references, timing, sizes over
-- CPU_MAX_BYTES.
--
-- The lint is laid out in lua/km/task/lint/, one file per concern; this file gathers them and
-- is the one callers require. The parts add their public names to one table, M, made in
-- reasons.lua and returned here:
--   reasons   M itself: the version, the tunables, the reasons and which of them stand where
--             (AT_TIMED, EVERY_SHAPE), what a machine can lack (MACHINE); M.flagged, M.reasons
--   sizes     what the parts share: elements and bytes at a shape set, out of memory (no
--             public names)
--   backends  where the reference runs: the judge on the GPU, PyTorch on the CPU; M.backend
--   rules     what flags: NaN/Inf, determinism, the trivial candidates, the sample estimate,
--             the closed form (M.erf, M.closed_form_p), a declared check_rows, and which flags
--             stand (decide)
--   run       one lint's state (ls) and its stages over the shape sets; M.run
--   keep      results kept (M.put, M.cached, M.transient, M.encodable, M.torch_version), what a
--             run keeps of them (M.brief, M.annotate_summary, M.gate), the table and JSON
--             (M.format, M.json)
-- The parts read a tunable from M each time they use it, so one set here
-- (lint.MIN_ELEMENTS = 16, lint.CLOSED_FORM_P = 0.05) is what every part reads.
local M = require "km.task.lint.reasons"
require "km.task.lint.backends"
require "km.task.lint.rules"
require "km.task.lint.run"
require "km.task.lint.keep"

return M
