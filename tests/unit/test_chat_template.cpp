// Chat templates rendered as transformers' apply_chat_template renders them. Every expected text
// and span below was rendered by Python jinja2 3.1.2 with transformers' settings
// (tests/support/chat_template_reference.py: trim_blocks, lstrip_blocks, loopcontrols, the
// generation block, tojson, raise_exception); rerun it to add a case.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "mpitrain/data/chat_template.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;

namespace {

ChatRendering render(std::string_view source, std::string_view context = "{}") {
  return ChatTemplate(source, "t").render(nlohmann::ordered_json::parse(context));
}

// The UsageError message of parsing and rendering `source` ("" when there is none).
std::string error_of(std::string_view source, std::string_view context = "{}") {
  try {
    render(source, context);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ChatTemplateWhitespace, TrimBlocksRemovesTheNewlineAfterABlockTag) {
  EXPECT_EQ(render(R"({% if true %}
yes
{% endif %}
end)")
                .text,
            R"(yes
end)");
  EXPECT_EQ(render(R"({{ 'x' }}
{# note #}
y)")
                .text,
            R"(x
y)");
  EXPECT_EQ(render(R"({% if true +%}
kept{% endif %})")
                .text,
            R"(
kept)");
}

TEST(ChatTemplateWhitespace, LstripBlocksRemovesIndentBeforeBlockTags) {
  EXPECT_EQ(
      render("  {% if true %}\n  a\n  {% endif %}\n  {{ 'b' }}\n\t{%+ if true %}c{% endif %}").text,
      "  a\n  b\n\tc");
  EXPECT_EQ(render("x  {% if true %}y{% endif %}").text, "x  y");
  EXPECT_EQ(render(R"(  {# c #}
z)")
                .text,
            "z");
}

TEST(ChatTemplateWhitespace, MinusStripsAllWhitespaceOnItsSide) {
  EXPECT_EQ(
      render("a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}\n\n c {{- ' d ' -}} e {#- x -#} f")
          .text,
      "abc d ef");
  EXPECT_EQ(render(R"(line
)")
                .text,
            "line");
}

TEST(ChatTemplateScoping, SetInLoopDoesNotLeakButNamespaceDoes) {
  EXPECT_EQ(render("{% set x = 1 %}{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{{ x }}{% set "
                   "x = i * 10 %}{{ x }},{% set ns.n = ns.n + i %}{% endfor %}{{ x }} {{ ns.n }}")
                .text,
            "110,120,1 3");
  EXPECT_EQ(render("{% if true %}{% set y = 'set in if' %}{% endif %}{{ y }}").text, "set in if");
  EXPECT_EQ(
      render(
          "{% for i in [1, 2] %}{% if loop.first %}{% set z = 5 %}{% endif %}[{{ z }}]{% endfor %}")
          .text,
      "[5][]");
}

TEST(ChatTemplateStatements, LoopVariables) {
  EXPECT_EQ(render("{% for x in items %}{{ loop.index0 }}{{ loop.index }}{{ loop.revindex0 }}{{ "
                   "loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }} {{ "
                   "loop.previtem }}/{{ loop.nextitem }};{% endfor %}",
                   "{\"items\": [\"a\", \"b\", \"c\"]}")
                .text,
            "0123TrueFalse3 /b;1212FalseFalse3 a/c;2301FalseTrue3 b/;");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4, 5] if x is odd %}{{ x }}:{{ loop.length }} {% else "
                   "%}none{% endfor %}{% for x in [] %}x{% else %}empty{% endfor %}")
                .text,
            "1:3 3:3 5:3 empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }} {% endfor %}{% for k in d %}{{ k "
                   "}}{% endfor %}{% for c in 'hé' %}<{{ c }}>{% endfor %}",
                   "{\"d\": {\"z\": 1, \"a\": 2}}")
                .text,
            "z=1 a=2 za<h><é>");
}

TEST(ChatTemplateStatements, BreakAndContinue) {
  EXPECT_EQ(render("{% for x in range(10) %}{% if x is even %}{% continue %}{% endif %}{% if x > 6 "
                   "%}{% break %}{% endif %}{{ x }}{% endfor %}")
                .text,
            "135");
}

TEST(ChatTemplateStatements, SetForms) {
  EXPECT_EQ(
      render(
          R"({% set a, b = [1, 'two'] %}{{ b }}{{ a }}{% set t = 1, 2 %}{{ t | length }}{% set block %}
  {{ a + 1 }}!{% endset %}[{{ block }}])")
          .text,
      "two12[  2!]");
}

TEST(ChatTemplateStatements, Macros) {
  EXPECT_EQ(render(R"({% macro tag(name, body='') -%}
<{{ name }}>{{ body }}</{{ name }}>
{%- endmacro %}{{ tag('a') }}{{ tag('b', 'x') }}{{ tag(body='y', name='c') }}{% macro count(n) %}{% if n > 0 %}{{ n }}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(3) }})")
                .text,
            "<a></a><b>x</b><c>y</c>321");
}

TEST(ChatTemplateExpressions, OperatorsAndPrecedence) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 2 ** 3 ** 2 }} {{ -x | abs }} {{ 7 // -2 }} {{ -7 % 3 }} {{ "
                   "7 / 2 }} {{ 1 ~ 2 ~ (3 + 4) }} {{ not x is defined }} {{ 1 < 2 < 3 }} {{ 'b' "
                   "in 'abc' }} {{ 3 not in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'a' if x else 'b' "
                   "}} {{ 'c' if false }}|{{ x or 'y' }} {{ 0 and 1 }} {{ 'ab' 'cd' }} {{ [1] + "
                   "[2] }} {{ 'ab' * 2 }} {{ 1 == 1.0 }} {{ [1, [2]] == [1, [2]] }}",
                   "{\"x\": -3}")
                .text,
            "7 64 3 -4 2 3.5 127 False True True True True a |-3 0 abcd [1, 2] abab True True");
  EXPECT_EQ(render("{{ '\\t\\u00e9\\x41\\101\\'\\\\' }}|{{ \"it's\" }}").text, "\téAA'\\|it's");
}

TEST(ChatTemplateExpressions, SubscriptsAndSlices) {
  EXPECT_EQ(render("{{ l[0] }}{{ l[-1] }}{{ l[1:] }}{{ l[:-1] }}{{ l[::-1] }}{{ l[::2] }}{{ "
                   "l[-1:0:-1] }}[{{ l[9] }}] {{ s[1:] }} {{ s[::-1] }} {{ s[-2] }} {{ d.k }}{{ "
                   "d['k'] }}{{ l.0 }}[{{ d.missing }}]",
                   "{\"l\": [1, 2, 3, 4], \"s\": \"héllo\", \"d\": {\"k\": \"v\"}}")
                .text,
            "14[2, 3, 4][1, 2, 3][4, 3, 2, 1][1, 3][4, 3, 2][] éllo olléh l vv1[]");
}

TEST(ChatTemplateExpressions, PythonStrOfValues) {
  EXPECT_EQ(render("{{ none }} {{ true }} {{ 1.0 }} {{ 0.1 }} {{ 1e-05 }} {{ 1e16 }} {{ 0.1 + 0.2 "
                   "}} {{ 2.5e-3 }} {{ [1, 'a', none, true, 1.5] }} {{ {'a': 1, 'b': [\"it's\"]} "
                   "}} {{ 'x' ~ 1.0 }} {{ 10 / 4 }}")
                .text,
            "None True 1.0 0.1 1e-05 1e+16 0.30000000000000004 0.0025 [1, 'a', None, True, 1.5] "
            "{'a': 1, 'b': [\"it's\"]} x1.0 2.5");
}

TEST(ChatTemplateExpressions, StringMethods) {
  EXPECT_EQ(
      render(
          "{{ ' a b  c '.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ "
          "'a,b,c'.rsplit(',', 1) }}[{{ '  x '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ "
          "'\\nx\\n'.lstrip('\\n') }}|{{ 'x  '.rstrip() }}]{{ 'ab'.startswith(('x', 'a')) }}{{ "
          "'ab'.endswith('b') }}{{ 'hello world'.title() }}{{ 'aBc'.capitalize() }}{{ "
          "'aBc'.upper() }}{{ 'aBc'.lower() }}{{ 'a-a'.replace('a', 'b') }}{{ 'abcabc'.find('c') "
          "}}{{ 'abcabc'.rfind('c') }}{{ 'abcabc'.count('b') }}{{ 'a\\nb\\r\\nc'.splitlines() }}{{ "
          "'12'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}{{ '-'.join(['a', 'b']) }}")
          .text,
      R"(['a', 'b', 'c']['a', 'b', '', 'c']['a', 'b,c']['a,b', 'c'][x|a|x
|x]TrueTrueHello WorldAbcABCabcb-b252['a', 'b', 'c']TrueTrueTruea-b)");
  EXPECT_EQ(render("{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 0) }} {{ d.keys() | list }} "
                   "{{ d.values() | list }}",
                   "{\"d\": {\"a\": 1, \"b\": 2}}")
                .text,
            "1 None 0 ['a', 'b'] [1, 2]");
}

// str.strip/lstrip/rstrip/split/rsplit/isspace without arguments and the trim and title filters
// take Python's whitespace (str.isspace()): Unicode's, such as U+00A0 and U+3000, not only ASCII.
TEST(ChatTemplateExpressions, WhitespaceIsUnicodeWhitespace) {
  const std::string source =
      "{% for m in messages %}[{{ m.content|trim }}|{{ m.content.strip() }}|"
      "{{ m.content.lstrip() }}|{{ m.content.rstrip() }}|{{ m.content.split()|join('/') }}|"
      "{{ m.content.split(none, 1)|join('/') }}|{{ m.content.rsplit(none, 1)|join('/') }}|"
      "{{ m.content.isspace() }}|{{ m.content|title }}]{% endfor %}"
      "{{ '  a b  c  '.split(none, 1) }}{{ '  a b  c  '.rsplit(none, 1) }}";
  const std::string context = R"({"messages": [
      {"role": "user", "content": "\u00a0\u3000hi\u2003\n"},
      {"role": "assistant", "content": "\u3000ab\u00a0cd\u2028 ef\u0085\u2029"},
      {"role": "user", "content": "\u00a0\u3000\u2003\u001c\n"}]})";
  // Rendered by jinja2 3.1.2 (tests/support/chat_template_reference.py).
  EXPECT_EQ(
      render(source, context).text,
      "[hi|hi|hi\u2003\n|\u00a0\u3000hi|hi|hi|hi|False|\u00a0\u3000Hi\u2003\n]"
      "[ab\u00a0cd\u2028 ef|ab\u00a0cd\u2028 ef|ab\u00a0cd\u2028 ef\u0085\u2029|\u3000ab\u00a0cd"
      "\u2028 ef|ab/cd/ef|ab/cd\u2028 ef\u0085\u2029|\u3000ab\u00a0cd/ef|False|\u3000Ab\u00a0Cd"
      "\u2028 Ef\u0085\u2029]"
      "[|||||||True|\u00a0\u3000\u2003\x1c\n]"
      "['a', 'b  c  ']['  a b', 'c']");
}

TEST(ChatTemplateFilters, StringFilters) {
  EXPECT_EQ(render("[{{ ' x '|trim }}][{{ 'xaxx'|trim('x') }}]{{ 'ABC'|lower }}{{ 'abc'|upper }}{{ "
                   "'hello-world foo'|title }}{{ 'aBC'|capitalize }}{{ 'a b'|replace(' ', '_') "
                   "}}{{ 1|string + 'x' }}{{ 'abc'|reverse }}{{ 'a<b>&\"\\''|e }}{{ 'x'|safe }}|{{ "
                   "'l1\\nl2\\n\\nl3'|indent }}|{{ 'l1\\nl2'|indent(2, true) }}")
                .text,
            R"([x][a]abcABCHello-World FooAbca_b1xcbaa&lt;b&gt;&amp;&#34;&#39;x|l1
    l2

    l3|  l1
  l2)");
}

TEST(ChatTemplateFilters, SequenceFilters) {
  EXPECT_EQ(
      render("{{ l|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(', ') }}|{{ "
             "l|rejectattr('role', 'eq', 'user')|list|length }}|{{ "
             "l|map(attribute='role')|unique|list }}|{{ l|selectattr('x')|list }}|{{ l|first }}|{{ "
             "(l|last).content }}|{{ [3, 1, 2]|sort }}|{{ ['b', 'A', 'a']|sort }}|{{ [1, "
             "2]|reverse|list }}|{{ [1, 2, 3]|sum }}{{ [1, 5, 2]|max }}{{ [1, 5, 2]|min }}|{{ "
             "d|items|list|length }}|{{ ['a', 1]|join }}|{{ 'ab'|list }}|{{ l|length }}{{ "
             "'hé'|length }}{{ d|count }}",
             "{\"l\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"bot\", \"content\": "
             "\"b\", \"x\": 1}, {\"role\": \"user\", \"content\": \"c\"}], \"d\": {\"k\": \"v\"}}")
          .text,
      "a, c|1|['user', 'bot']|[{'role': 'bot', 'content': 'b', 'x': 1}]|{'role': 'user', "
      "'content': 'a'}|c|[1, 2, 3]|['A', 'a', 'b']|[2, 1]|651|1|a1|['a', 'b']|321");
}

TEST(ChatTemplateFilters, NumbersAndDefaults) {
  EXPECT_EQ(render("{{ '3.7'|int }}{{ 'x'|int }}{{ 3.9|int }} {{ '2.5'|float }} {{ 2.5|round }} {{ "
                   "3.14159|round(2) }} {{ -3|abs }} {{ missing|default('d') }} {{ ''|default('e', "
                   "true) }} {{ ''|d('f') }}|")
                .text,
            "303 2.5 2.0 3.14 3 d e |");
}

TEST(ChatTemplateFilters, TojsonKeepsKeyOrderAndFormatsLikePython) {
  EXPECT_EQ(
      render(R"({{ d|tojson }}
{{ d|tojson(indent=2) }}
{{ d|tojson(separators=(',', ':')) }} {{ 'é'|tojson(ensure_ascii=true) }} {{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }})",
             "{\"d\": {\"z\": 1, \"a\": [1, 2.5, {\"q\": null}], \"e\": [], \"f\": {}, \"s\": "
             "\"é\\n\\\"x\\u0001\", \"t\": true, \"big\": 1e+20}}")
          .text,
      R"({"z": 1, "a": [1, 2.5, {"q": null}], "e": [], "f": {}, "s": "é\n\"x\u0001", "t": true, "big": 1e+20}
{
  "z": 1,
  "a": [
    1,
    2.5,
    {
      "q": null
    }
  ],
  "e": [],
  "f": {},
  "s": "é\n\"x\u0001",
  "t": true,
  "big": 1e+20
}
{"z":1,"a":[1,2.5,{"q":null}],"e":[],"f":{},"s":"é\n\"x\u0001","t":true,"big":1e+20} "\u00e9" {"a": 2, "b": 1})");
}

TEST(ChatTemplateTests, TypeAndValueTests) {
  EXPECT_EQ(render("{{ x is defined }}{{ x is undefined }}{{ x is none }}{{ n is none }}{{ n is "
                   "not none }}{{ 1 is number }}{{ 1.0 is integer }}{{ 1.0 is float }}{{ true is "
                   "boolean }}{{ false is false }}{{ 'a' is string }}{{ d is mapping }}{{ l is "
                   "sequence }}{{ l is iterable }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby "
                   "3 }}{{ 2 is in [1, 2] }}{{ 1 is eq 1 }}{{ 1 is ne 2 }}{{ 2 is gt 1 }}{{ 1 is "
                   "lt 0 }}{{ n is sameas none }}{{ range is callable }}",
                   "{\"n\": null, \"d\": {}, \"l\": []}")
                .text,
            "FalseTrueFalseTrueFalseTrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTr"
            "ueFalseTrueTrue");
}

TEST(ChatTemplateUndefined, UndefinedIsEmptyAndFalsy) {
  EXPECT_EQ(render("[{{ x }}]{{ x is defined }}{{ not x }}{{ x|length }}{{ x ~ 's' }}{% for a in x "
                   "%}no{% endfor %}{% if x %}no{% endif %}{{ d.missing is defined }}{{ n.attr is "
                   "defined }}{{ x == x }}",
                   "{\"d\": {}, \"n\": null}")
                .text,
            "[]FalseTrue0sFalseFalseTrue");
}

TEST(ChatTemplateGeneration, SpansAreByteOffsets) {
  const ChatRendering r = render(
      "é{% generation %}ü{{ x }}{% endgeneration %}-{% for m in ['a', 'b'] %}{% generation %}{{ m "
      "}}{% endgeneration %}{% endfor %}",
      "{\"x\": \"→\"}");
  EXPECT_EQ(r.text, "éü→-ab");
  EXPECT_EQ(r.generation, (std::vector<TextSpan>{{2, 7}, {8, 9}, {9, 10}}));
}

TEST(ChatTemplateModels, QwenStyleMultiTurn) {
  const ChatRendering r =
      render(R"({%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'system' %}
        {%- continue %}
    {%- elif message.role == 'assistant' %}
        {%- set content = message.content %}
        {%- if '</think>' in content %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {{- '<|im_start|>assistant\n' }}
        {%- generation %}
            {{- content }}
            {%- for call in message.tool_calls | default([]) %}
                {{- '\n<tool_call>\n' + {'name': call.function.name, 'arguments': call.function.arguments} | tojson + '\n</tool_call>' }}
            {%- endfor %}
            {{- '<|im_end|>' }}
        {%- endgeneration %}
        {{- '\n' }}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)",
             "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": "
             "\"user\", \"content\": \"Größe?\"}, {\"role\": \"assistant\", \"content\": "
             "\"<think>\\nmetric\\n</think>\\n\\n1,8 m\", \"tool_calls\": [{\"type\": "
             "\"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"b\": 1, \"a\": "
             "\"x\"}}}]}, {\"role\": \"user\", \"content\": \"Danke\"}, {\"role\": \"assistant\", "
             "\"content\": \"Gern.\"}], \"add_generation_prompt\": false}");
  EXPECT_EQ(r.text, R"(<|im_start|>system
Be brief.<|im_end|>
<|im_start|>user
Größe?<|im_end|>
<|im_start|>assistant
1,8 m
<tool_call>
{"name": "f", "arguments": {"b": 1, "a": "x"}}
</tool_call><|im_end|>
<|im_start|>user
Danke<|im_end|>
<|im_start|>assistant
Gern.<|im_end|>
)");
  EXPECT_EQ(r.generation, (std::vector<TextSpan>{{97, 184}, {240, 255}}));
}

TEST(ChatTemplateModels, LlamaStyleMultiTurn) {
  const ChatRendering r =
      render(R"({{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "Cutting Knowledge Date: December 2023" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}
    {%- if message['role'] == 'assistant' %}
        {%- generation %}{{ message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}
    {%- else %}
        {{- message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)",
             "{\"bos_token\": \"<|begin_of_text|>\", \"add_generation_prompt\": true, "
             "\"messages\": [{\"role\": \"system\", \"content\": \" You are terse. \"}, {\"role\": "
             "\"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello ☺ "
             "\"}, {\"role\": \"user\", \"content\": \"Bye\"}]}");
  EXPECT_EQ(r.text, R"(<|begin_of_text|><|start_header_id|>system<|end_header_id|>

You are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>

Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>

Hello ☺<|eot_id|><|start_header_id|>user<|end_header_id|>

Bye<|eot_id|><|start_header_id|>assistant<|end_header_id|>

)");
  EXPECT_EQ(r.generation, (std::vector<TextSpan>{{186, 205}}));
}

TEST(ChatTemplateErrors, UndefinedUsedAsAValueRaises) {
  EXPECT_EQ(error_of("{{ x.y }}"), "t line 1: 'x' is undefined");
  EXPECT_EQ(error_of("\n{{ x + 1 }}"), "t line 2: 'x' is undefined");
  EXPECT_EQ(error_of("{{ x() }}"), "t line 1: 'x' is undefined");
  EXPECT_EQ(error_of("{{ x['k'] }}"), "t line 1: 'x' is undefined");
  EXPECT_EQ(error_of("{{ x < 1 }}"), "t line 1: 'x' is undefined");
  EXPECT_EQ(error_of("{{ d.a.b }}", R"({"d": {}})"),
            "t line 1: 'dict object' has no attribute 'a'");
}

TEST(ChatTemplateErrors, TypeErrorsRaise) {
  EXPECT_EQ(error_of("{{ 'a' + 1 }}"), "t line 1: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(error_of("{{ 1 ~ 2 + 3 }}"), "t line 1: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(error_of("{{ 1 // 0 }}"), "t line 1: integer division or modulo by zero");
  EXPECT_EQ(error_of("{{ 'a'.nope() }}"), "t line 1: 'str' object has no attribute 'nope'");
}

TEST(ChatTemplateErrors, RaiseExceptionPassesItsMessage) {
  EXPECT_EQ(error_of("{% if true %}\n{{ raise_exception('Roles must alternate') }}{% endif %}"),
            "t line 2: raise_exception: Roles must alternate");
}

TEST(ChatTemplateErrors, RefusedAtParseTime) {
  EXPECT_THROW(ChatTemplate("a\n{{ x | foo }}", "t"), UsageError);
  EXPECT_EQ(error_of("a\n{{ x | foo }}"), "t line 2: unknown filter 'foo'");
  EXPECT_EQ(error_of("{{ x is foo }}"), "t line 1: unknown test 'foo'");
  EXPECT_EQ(error_of("{% include 'other.jinja' %}"), "t line 1: 'include' is not supported");
  EXPECT_EQ(error_of("{% extends 'base' %}"), "t line 1: 'extends' is not supported");
  EXPECT_EQ(error_of("{% frobnicate %}"), "t line 1: unknown statement 'frobnicate'");
  EXPECT_EQ(error_of("a\n\n{% if %}"), "t line 3: unexpected end of statement block");
  EXPECT_EQ(error_of("{% for x in y %}\n"),
            "t line 1: unexpected end of template, expected 'endfor'");
  EXPECT_EQ(error_of("{% break %}"), "t line 1: 'break' outside a loop");
  EXPECT_EQ(error_of("{{ 'open }}"), "t line 1: unterminated string");
  EXPECT_EQ(error_of("{# never closed"), "t line 1: missing end of comment tag");
}

TEST(ChatTemplateErrors, SandboxRefusesMutationAndHugeWork) {
  EXPECT_EQ(error_of("{{ [1].append(2) }}"),
            "t line 1: access to attribute 'append' of 'list' object is unsafe");
  EXPECT_EQ(error_of("{{ {}.update(a=1) }}"),
            "t line 1: access to attribute 'update' of 'dict' object is unsafe");
  EXPECT_EQ(error_of("{% set ns = 1 %}{% set ns.a = 2 %}"),
            "t line 1: cannot assign attribute on non-namespace object");
  EXPECT_EQ(error_of("{{ range(100001) | length }}"),
            "t line 1: range too big, the sandbox allows at most 100000 items");
  const std::string block(1 << 16, 'x');  // 100000 of them: 6.5 GB asked for
  EXPECT_EQ(error_of("{% for i in range(100000) %}" + block + "{% endfor %}"),
            "t line 1: the rendering exceeds 64 MiB");
  EXPECT_EQ(error_of("{% set s %}{% for i in range(2000) %}{{ '" + block +
                     "' }}{% endfor %}"
                     "{% endset %}"),
            "t line 1: the rendering exceeds 64 MiB");  // a capture too
  EXPECT_EQ(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
            "t line 1: macro calls nested deeper than 256");
  EXPECT_EQ(error_of(std::string(1000, '(') + "1" + std::string(1000, ')')),
            "");  // no statement: plain text
  EXPECT_EQ(error_of("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}"),
            "t line 1: nested too deeply");
}

TEST(ChatTemplateGeneration, HasGeneration) {
  EXPECT_TRUE(ChatTemplate("{% generation %}x{% endgeneration %}", "t").has_generation());
  EXPECT_FALSE(ChatTemplate("{{ x }}", "t").has_generation());
}

TEST(ChatTemplateRender, RendersOnSeveralThreadsAtOnce) {
  const ChatTemplate chat(
      "{% set ns = namespace(s='') %}{% for m in messages %}"
      "{% set ns.s = ns.s ~ m %}{% endfor %}{{ ns.s }}",
      "t");
  std::vector<std::string> texts(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < texts.size(); ++i) {
    threads.emplace_back([&, i] {
      const auto context = nlohmann::ordered_json{{"messages", {std::to_string(i), "x"}}};
      for (int k = 0; k < 200; ++k) texts[i] = chat.render(context).text;
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(texts[i], std::to_string(i) + "x");
}

TEST(ChatTemplateRender, MovedTemplateStillRenders) {
  ChatTemplate a("{{ 1 + 1 }}", "t");
  ChatTemplate b = std::move(a);
  EXPECT_EQ(b.render(nlohmann::ordered_json::object()).text, "2");
}
