-- km.task.lint.sizes — the sizes the parts of km.task.lint share: an input's or output's
-- elements and a task's bytes at a shape set, and whether an error says the device ran out of
-- memory (a fact about the machine, not the task: km.task.lint's runs leave it unchecked).
--
-- State: none.
local task_mod = require "km.task"

local ipairs, tostring = ipairs, tostring

-- An error that says the device ran out of memory (km.verdict's reading).
local out_of_memory = require("km.verdict").out_of_memory

local function numel_of(spec, sym) return task_mod.numel(task_mod.shape_of(spec, sym)) end
local function bytes_of(t, sym)
  local n = 0
  for _, list in ipairs { t.inputs, t.outputs } do
    for _, spec in ipairs(list) do n = n + numel_of(spec, sym) * task_mod.DTYPE_BYTES[spec.dtype] end
  end
  return n
end

return { out_of_memory = out_of_memory, numel_of = numel_of, bytes_of = bytes_of }
