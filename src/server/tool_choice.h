/* Enforcing tool_choice "required" and a named function: the prompt is
 * made to end with the opening of a call in the model's own form (see
 * lm_tool_call_opening), so the model's first tokens are that call's
 * arguments, constrained by the call grammar (tool_call_grammar.h); the
 * tool parser is started inside the call (lm_tool_parser_start_forced).
 *
 * For "required" with several tools the function is chosen first, one token
 * at a time: the model samples among the tokens that continue some tool's
 * opening (a logit bias of +100 on exactly those, with the request's own
 * sampling settings), until one tool is left.  Usually one short engine
 * request (a prefill and one token) when the names differ early; more when
 * names share a prefix.  That keeps the name one of the tools even for a
 * model that would write another.  With n > 1 all choices call the same
 * function. */
#ifndef LOOM_SERVER_TOOL_CHOICE_H
#define LOOM_SERVER_TOOL_CHOICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/server_internal.h"
#include "server/tool_parser.h"

/* True when the request's tool_choice asks for a forced call and the prompt
 * ends in a fresh assistant turn where one can be forced (not with
 * continue_final_message or without the generation prompt). */
bool lm_tool_choice_forces_call(const lm_openai_request *r);

/* What goes between a rendered chat prompt and a forced call's opening, so
 * that the turn reads as the template writes an assistant turn that calls a
 * tool without reasoning (only when template_has_think):
 *   JSON, XML (Qwen): "\n</think>\n\n" when the generation prompt left a
 *     thinking block open (the prompt's last <think> is not closed), so the
 *     call is not written inside the reasoning; else "".
 *   GLM: the rest of "\n<think></think>\n" after the last <|assistant|>
 *     (GLM's history form "<|assistant|>\n<think></think>\n<tool_call>NAME\n"):
 *     "<think></think>\n" after GLM-4.6V's "<|assistant|>\n", "\n" after
 *     GLM-4.6's "<|assistant|>\n<think></think>", "" when thinking is off in
 *     GLM-4.6V; "</think>\n" when a <think> is left open there.
 * The result is a static string. */
const char *lm_forced_call_bridge(lm_tool_form form, const char *prompt, size_t len, bool template_has_think);

/* The token prompt of a forced call: prompt[0..n_prompt) (the rendered chat
 * prompt, thinking closed, as ids) followed by the ids of the chosen
 * function's call opening.  *name is the function (borrowed from the
 * request).  The opening is tokenized on its own: it starts with
 * <tool_call>, a special token in every supported family, so no token
 * spans the boundary.  On failure *http_status is the status to answer. */
lm_status lm_forced_call_prompt(lm_server *s, struct MHD_Connection *c, const lm_openai_request *r,
                                lm_tool_form form, const int32_t *prompt, size_t n_prompt, int32_t **ids,
                                size_t *n_ids, const char **name, unsigned *http_status, lm_error *err);

/* The grammar of a forced call's output (after its opening) to a tool with
 * "strict": true (others are forced without one, as before) in the form
 * (tool_call_grammar.h): the function's arguments by its parameters schema,
 * then, when parallel_tool_calls allows, more calls (to a tool not strict
 * whose schema loom cannot enforce: the form's generic arguments); it
 * replaces the request's response_format grammar, which is for content.
 * Fails (LM_ERR_INVALID, HTTP 400) on a strict tool's schema loom cannot
 * enforce in the form. */
lm_status lm_forced_call_grammar(lm_openai_request *r, lm_tool_form form, const char *name, lm_error *err);

#endif
