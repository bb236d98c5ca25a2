-- agent: the model drives through tool calls — compile, run_tests, benchmark,
-- read_guidance, submit — until it submits or runs out of turns.
--
-- --set turns=15  model turns before the episode ends without a submission (default 3 x --rounds)
local prompt = require "km.run.prompt"

local function code_args(desc)
  return { type = "object", required = { "kernel_cu", "launch_lua" }, properties = {
    kernel_cu = { type = "string", description = "the whole kernel.cu" },
    launch_lua = { type = "string", description = "the whole launch.lua" } }, description = desc }
end
local TOOLS = {
  { name = "compile", description = "Compile kernel.cu with NVRTC and load launch.lua; returns the log.", parameters = code_args() },
  { name = "run_tests", description = "Check the candidate on every shape and seed (no timing).", parameters = code_args() },
  { name = "benchmark", description = "Check and time the candidate against the reference.", parameters = code_args() },
  { name = "read_guidance", description = "Read CUDA guidance on a topic (e.g. 'coalescing', 'warp reduction').",
    parameters = { type = "object", required = { "topic" }, properties = { topic = { type = "string" } } } },
  { name = "submit", description = "Submit the final candidate.", parameters = code_args() },
}

local function candidate(args)
  return { source = args.kernel_cu or "", launch = args.launch_lua or "", params = {} }
end

return function(ctx)
  local messages = prompt.implement(ctx.task, { forms = ctx.args.forms })
  messages[#messages].content = messages[#messages].content ..
    "\n\nUse the tools to compile, test and time your kernel; call submit with the final version."
  if ctx.offline then
    local cand = ctx.propose(messages)
    return cand, ctx.eval(cand)
  end
  local final, final_v
  for _ = 1, ctx.args.turns or ctx.args.rounds * 3 do
    -- tool_choice: servers such as llama.cpp's ignore tools unless asked to use them
    local reply = ctx.llm:chat(messages, { tools = TOOLS, tool_choice = "auto" })
    if not reply then break end -- a model error: the episode ends on it (km.run.model)
    table.insert(messages, { role = "assistant", content = reply.content or "", tool_calls = reply.tool_calls,
      km_call = reply.km_call })
    if not reply.tool_calls or #reply.tool_calls == 0 then
      local cand, why = prompt.extract(reply.content)
      if cand then final, final_v = cand, ctx.eval(cand) break end
      table.insert(messages, { role = "user", content = why .. " Or call a tool." })
    end
    for _, call in ipairs(reply.tool_calls or {}) do
      local args = call.args -- nil when the arguments are not strict JSON: a tool error
      ctx.log("tool_call", { id = call.id, name = call.name, args = args, arguments_error = call.arguments_error })
      local result
      if not args then
        result = "Error: the arguments of " .. tostring(call.name) .. " are not valid JSON (" ..
          tostring(call.arguments_error or "unreadable") .. "). Call the tool again with a JSON object; " ..
          "escape newlines inside strings as \\n."
      elseif call.name == "compile" then result = prompt.verdict_text(ctx.compile(candidate(args)))
      elseif call.name == "run_tests" then result = prompt.verdict_text(ctx.eval(candidate(args), { timing = false }))
      elseif call.name == "benchmark" then result = prompt.verdict_text(ctx.eval(candidate(args)))
      elseif call.name == "read_guidance" then
        local found = ctx.guidance:search(tostring(args.topic or ""))
        result = #found > 0 and prompt.render_guides({ found[1], found[2] }) or "No guide matches that topic."
      elseif call.name == "submit" then
        final = candidate(args)
        final_v = ctx.eval(final)
        result = prompt.verdict_text(final_v)
      else
        result = "unknown tool " .. tostring(call.name)
      end
      ctx.log("tool_result", { id = call.id, name = call.name, result = result })
      table.insert(messages, { role = "tool", tool_call_id = call.id, content = result })
    end
    if final_v then break end
  end
  if not final_v then final_v = ctx.eval(nil, { why = "no candidate was submitted" }) end
  return final, final_v
end
