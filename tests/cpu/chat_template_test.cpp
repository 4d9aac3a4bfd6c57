// The chat template interpreter against jinja2 configured as transformers configures it: every construct of the
// subset renders byte for byte as jinja2 renders it (or fails where jinja2 fails), constructs outside the subset are
// refused naming their line, and errors name the line they happen on.
#include <gtest/gtest.h>

#include "chat_template_testing.h"

namespace tk::testing {
namespace {

using C = TemplateCase;

const ojson kMessages = ojson::parse(R"([
  {"role": "system", "content": "Be brief."},
  {"role": "user", "content": "Héllo, 世界! 🎉"},
  {"role": "assistant", "content": "  Hi\nthere  ", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1, "y": "ü"}}}]},
  {"role": "tool", "content": "{\"ok\": true}"},
  {"role": "user", "content": ""}
])");

TEST(ChatTemplate, TextCommentsAndWhitespaceControl) {
  expect_same_as_jinja2({
      C{"plain text, no tags"},
      C{"trailing newline dropped\n"},
      C{"two trailing newlines\n\n"},
      C{"crlf\r\nlines\rnormalised\r\n"},
      C{"a{# comment #}b"},
      C{"a\n  {# comment #}\nb"},
      C{"a  {#- comment -#}  \n b"},
      C{"{% if true %}\nline\n{% endif %}\nafter"},
      C{"  {% if true %}indented tag{% endif %}\n"},
      C{"  {{ 'variables keep their indent' }}\n"},
      C{"x  {% if true %}not at line start{% endif %}"},
      C{"line\n\t  {% if true %}tab{% endif %}\n"},
      C{"a  \n  {%- if true -%}  \n  b  {%- endif -%}  \n  c"},
      C{"a  {{- 'x' -}}  b"},
      C{"  {%+ if true %}plus keeps indent{% endif %}"},
      C{"{% if true +%}\nplus keeps newline{% endif %}"},
      C{"\u3000\u00a0{%- if true %}unicode whitespace stripped{% endif %}"},
      C{"{% raw %}{{ not evaluated }} {% if %}{% endraw %}"},
      C{"{%- raw -%}  {{ x }}  {%- endraw %}\nafter"},
      C{"{{ '{{' }} and {{ '}}' }} and {{ {'a': {'b': 1}} }}"},
  });
}

TEST(ChatTemplate, LiteralsAndPrinting) {
  expect_same_as_jinja2({
      C{"{{ 'single' }} {{ \"double\" }} {{ 'it\\'s' }} {{ \"say \\\"hi\\\"\" }}"},
      C{"{{ 'esc: \\n \\t \\\\ \\x41 \\u00e9 \\U0001F600 \\101 \\q' }}"},
      C{"{{ 'adjacent' ' literals' \" join\" }}"},
      C{"{{ 42 }} {{ -7 }} {{ 1_000_000 }} {{ 1.5 }} {{ 2.5e3 }} {{ 1e16 }} {{ 1e15 }} {{ 0.00001 }} {{ 0.1 + 0.2 }}"},
      C{"{{ true }} {{ false }} {{ none }} {{ True }} {{ None }}"},
      C{"{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}] }}"},
      C{"{{ (1,) }} {{ (1, 'b') }} {{ () }}"},
      C{"{{ {'a': 1, 'b': [1, 2], 3: 'x'} }}"},
      C{"{{ [\"it's\", 'a\"b', 'x\\ny', '\\xa0', 'é', '\\u2028', '\\x7f'] }}"},
      C{"{{ undefined_name }}|{{ 1, 2 }}"},
      C{"{{ messages }}", {{"messages", kMessages}}},
      C{"{{ x }}", {{"x", 3.0}}},
      C{"{{ x }}", {{"x", 123456789012}}},
  });
}

TEST(ChatTemplate, Operators) {
  expect_same_as_jinja2({
      C{"{{ 1 + 2 }} {{ 1 + 2.5 }} {{ 7 - 10 }} {{ 3 * 4 }} {{ 7 / 2 }} {{ 8 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }}"},
      C{"{{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 0.5 }}"},
      C{"{{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 1 + 2 * 3 - 4 / 2 }} {{ (1 + 2) * 3 }}"},
      C{"{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [1] + [2, 3] }} {{ [0] * 3 }} {{ 'a' ~ 1 ~ none ~ x }}"},
      C{"{{ true + 1 }} {{ -true }} {{ +3 }} {{ not 0 }} {{ not 'x' }}"},
      C{"{{ 1 == 1.0 }} {{ 1 != 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2 }}"},
      C{"{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 'x' in undefined }}"},
      C{"{{ 0 or 'default' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ none or none }} {{ 1 and 0 or 5 }}"},
      C{"{{ 'yes' if true else 'no' }} {{ 'yes' if false }} {{ 'a' if 0 else 'b' if 1 else 'c' }}"},
      C{"{{ none == none }} {{ undefined_x == none }} {{ [] == [] }} {{ {'a': 1} == {'a': 1} }} {{ (1, 2) == [1, 2] }}"},
  });
}

TEST(ChatTemplate, IfForAndLoopVariables) {
  expect_same_as_jinja2({
      C{"{% if x == 1 %}one{% elif x == 2 %}two{% elif x == 3 %}three{% else %}other{% endif %}", {{"x", 3}}},
      C{"{% if x %}{% if y %}both{% else %}x only{% endif %}{% endif %}", {{"x", true}, {"y", false}}},
      C{"{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}"
        "/{{ loop.first }}/{{ loop.last }}/{{ loop.length }} {% endfor %}",
        {{"messages", kMessages}}},
      C{"{% for x in [1, 2, 3] %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('a', 'b') }}]{% endfor %}"},
      C{"{% for x in [] %}never{% else %}empty{% endfor %}"},
      C{"{% for x in range(10) if x is odd %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}"},
      C{"{% for k, v in {'a': 1, 'b': 2} | items %}{{ k }}={{ v }};{% endfor %}{% for k in {'c': 1, 'd': 2} %}{{ k }}{% endfor %}"},
      C{"{% for c in 'héllo' %}[{{ c }}]{% endfor %}{% for x in undefined %}x{% endfor %}"},
      C{"{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}{% for (a, b) in [[5, 6]] %}{{ a * b }}{% endfor %}"},
      C{"{% for x in [1, 2] %}{% for y in 'ab' %}{{ x }}{{ y }}{{ loop.index }} {% endfor %}{{ loop.index }}{% endfor %}"},
      C{"{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"},
      C{"{% for x in range(1, 10, 3) %}{{ x }}{% endfor %}{% for x in range(5, 0, -2) %}{{ x }}{% endfor %}"},
      C{"{% for m in messages[::-1] %}{{ m.role }} {% endfor %}", {{"messages", kMessages}}},
  });
}

TEST(ChatTemplate, SetNamespacesAndScopes) {
  expect_same_as_jinja2({
      C{"{% set x = 1 %}{% set y = x + 1 %}{{ x }}{{ y }}"},
      C{"{% set a, b = [1, 2] %}{{ b }}{{ a }}{% set t = 1, 2 %}{{ t }}"},
      C{"{% set x = 5 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}[{{ x }}]"},
      C{"{% for i in [1, 2] %}{% if i == 2 %}[{{ x }}]{% endif %}{% set x = i %}{% endfor %}[{{ x }}]"},
      C{"{% if true %}{% set x = 'set in if' %}{% endif %}{{ x }}"},
      C{"{% set ns = namespace(count=0, found=false) %}{% for i in range(4) %}{% set ns.count = ns.count + i %}"
        "{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }} {{ ns.missing }}"},
      C{"{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}"},
      C{"{% set block %}  inside {{ 1 + 1 }}\n{% endset %}[{{ block }}]{% set up | upper | trim %} shout {% endset %}[{{ up }}]"},
      C{"{% filter upper %}filtered {{ 'block' }}{% endfilter %}"},
      C{"{% set messages = messages[1:] %}{{ messages | length }}", {{"messages", kMessages}}},
  });
}

TEST(ChatTemplate, Macros) {
  expect_same_as_jinja2({
      C{"{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} "
        "{{ greet(punct='.', name='c') }} [{{ greet() }}]"},
      C{"{% macro item(x) -%}\n  <{{ x }}>\n{%- endmacro %}{% for i in [1, 2] %}{{ item(i) ~ ',' }}{% endfor %}"},
      C{"{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}"},
      C{"{% set g = 'outer' %}{% macro show() %}{{ g }}{% endmacro %}{{ show() }}"},
      C{"{% macro render_list(items, tag='required') %}{% if items is defined and items is iterable and items | length > 0 %}"
        "<{{ tag }}>{% for i in items %}{% if loop.index > 1 %}, {% endif %}{% if i is string %}`{{ i }}`{% else %}{{ i }}"
        "{% endif %}{% endfor %}</{{ tag }}>{% endif %}{% endmacro %}{{ render_list(['a', 1, none]) }}{{ render_list([]) }}"},
  });
}

TEST(ChatTemplate, Filters) {
  expect_same_as_jinja2({
      C{"[{{ '  pad\n ' | trim }}] [{{ 'xxhixx' | trim('x') }}] [{{ none | trim }}] [{{ undefined_v | trim }}]"},
      C{"{{ 'héllo' | length }} {{ [1, 2] | length }} {{ {'a': 1} | count }} {{ undefined_v | length }}"},
      C{"{{ 'MiXed' | upper }} {{ 'MiXed' | lower }} {{ 'élan vital' | capitalize }} {{ 'hello-world (foo) bar' | title }}"},
      C{"{{ 'Straße' | upper }} {{ 'ΣΑΣ' | lower }}"},
      C{"{{ undefined_v | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ 0 | d(5, boolean=true) }}"},
      C{"{{ [1, 'a', none] | join(', ') }} {{ [{'n': 'x'}, {'n': 'y'}] | join('-', attribute='n') }} {{ 'abc' | join('.') }}"},
      C{"{{ 'abc' | list }} {{ {'k': 1, 'j': 2} | list }} {{ [3, 1] | first }} {{ [3, 1] | last }} {{ 'xyz' | first }}"},
      C{"{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('odd') | list }} {{ [0, 1, '', 'a'] | select | list }}"},
      C{"{{ ['a', 'code_interpreter', 'b'] | reject('equalto', 'code_interpreter') | join(', ') }}"},
      C{"{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}", {{"messages", kMessages}}},
      C{"{{ messages | rejectattr('tool_calls') | map(attribute='role') | join(',') }}", {{"messages", kMessages}}},
      C{"{{ messages | map(attribute='missing', default='-') | list }} {{ ['a', 'b'] | map('upper') | list }}",
        {{"messages", kMessages}}},
      C{"{{ 'aXbXc' | replace('X', '-') }} {{ 'aXbXc' | replace('X', '', 1) }} {{ 'abc' | reverse }} {{ [1, 2] | reverse | list }}"},
      C{"{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A'] | sort(case_sensitive=true) }} {{ [1, 3, 2] | sort(reverse=true) }}"},
      C{"{{ [{'n': 2}, {'n': 1}] | sort(attribute='n') }} {{ ['a', 'A', 'b'] | unique | list }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }}"},
      C{"{{ [1, 2, 3] | sum }} {{ [{'v': 1.5}, {'v': 2}] | sum(attribute='v') }} {{ {'b': 1, 'a': 2} | dictsort }}"},
      C{"{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ ' 12 ' | int }} {{ '0x1A' | int(0, 16) }}"},
      C{"{{ '2.5' | float }} {{ 'x' | float }} {{ 3 | float }} {{ -3 | abs }} {{ -2.5 | abs }}"},
      C{"{{ 'a\nb\n\nc' | indent }}|{{ 'a\nb' | indent(2, true) }}|{{ 'a\n\nb' | indent('> ', blank=true) }}"},
      C{"{{ 5 | string }}{{ none | string }}{{ [1] | string }} {{ 1 | safe }} {{ {'a': 1} | attr('items') is callable }}"},
      C{"{{ x | tojson }}", {{"x", ojson::parse(R"({"s": "é\n\"q\"\\ \u0001 \u007f ☃ 🎉", "n": [1, 2.5, -0.0, 1e20, true, null], "e": {}, "l": []})")}}},
      C{"{{ x | tojson(indent=4) }}\n{{ x | tojson(indent=2, sort_keys=true) }}\n{{ x | tojson(ensure_ascii=true) }}",
        {{"x", ojson::parse(R"({"name": "f", "parameters": {"type": "object", "properties": {"ü": {"type": "string"}}}, "empty": [], "e2": {}})")}}},
      C{"{{ x | tojson(separators=(',', ':')) }} {{ (1, 'a') | tojson }} {{ 'str' | tojson }} {{ 3 | tojson }}",
        {{"x", ojson::parse(R"({"a": [1, 2]})")}}},
      C{"{{ {1: 'int key', true: 'b', none: 'n', 1.5: 'f'} | tojson }}"},
      C{"{{ d | items | list }}", {{"d", ojson::object({{"k", "v"}})}}},
  });
}

TEST(ChatTemplate, Tests) {
  expect_same_as_jinja2({
      C{"{{ x is defined }} {{ undefined_v is defined }} {{ undefined_v is undefined }} {{ none is none }} {{ x is not none }}",
        {{"x", 1}}},
      C{"{{ 'a' is string }} {{ 1 is string }} {{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 1 is integer }}"
        " {{ true is integer }} {{ 1.5 is float }} {{ true is boolean }} {{ 1 is boolean }}"},
      C{"{{ {} is mapping }} {{ [] is mapping }} {{ 'a' is iterable }} {{ [] is iterable }} {{ {} is iterable }}"
        " {{ 1 is iterable }} {{ undefined_v is iterable }} {{ 'a' is sequence }} {{ 1 is sequence }} {{ none is iterable }}"},
      C{"{{ true is true }} {{ 1 is true }} {{ false is false }} {{ range is callable }} {{ 'a' is callable }}"},
      C{"{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 1 is eq 1 }}"
        " {{ 1 is equalto(2) }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 3 is gt(2) }} {{ 3 is ge 3 }} {{ 2 is le 1 }}"},
      C{"{{ 'b' is in 'abc' }} {{ 2 is in [1, 2] }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }}"
        " {{ none is sameas none }} {{ false is sameas false }} {{ 'upper' is filter }} {{ 'odd' is test }}"},
      C{"{{ messages[0].content is string and messages[0].role == 'system' }}", {{"messages", kMessages}}},
  });
}

TEST(ChatTemplate, StringDictAndListMethods) {
  expect_same_as_jinja2({
      C{"{{ 'hello'.startswith('he') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.endswith('lo') }} {{ ''.startswith('') }}"},
      C{"[{{ '  x  '.strip() }}] [{{ '  x  '.lstrip() }}] [{{ '  x  '.rstrip() }}] [{{ '\\n\\nx\\n'.strip('\\n') }}] [{{ 'xyzx'.strip('xz') }}]"},
      C{"{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ''.split() }} {{ ''.split(',') }}"},
      C{"{{ 'x</think>y</think>z'.split('</think>')[-1] }} {{ '<think>r</think>a'.split('</think>')[0].split('<think>')[-1] }}"},
      C{"{{ 'aaa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.replace('', '-') }} {{ 'Mixed'.upper() }} {{ 'Mixed'.lower() }}"},
      C{"{{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'abcabc'.find('c') }} {{ 'abcabc'.rfind('c') }} {{ 'abc'.find('z') }}"},
      C{"{{ 'ééa'.find('a') }} {{ 'abab'.count('ab') }} {{ ', '.join(['a', 'b']) }} {{ 'a\\nb\\r\\nc'.splitlines() }}"},
      C{"{{ '123'.isdigit() }} {{ '12a'.isdigit() }} {{ 'abc'.isalpha() }} {{ ' \\t'.isspace() }} {{ ''.isspace() }} {{ 'ab'.islower() }}"},
      C{"{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }}",
        {{"d", ojson::parse(R"({"a": 1, "b": [2]})")}}},
      C{"{{ d.items is defined }} {{ d['items'] }} {{ d.other }} {{ d['other'] }} {{ d.get is callable }}",
        {{"d", ojson::parse(R"({"items": 3, "other": 4})")}}},
      C{"{{ [1, 2, 1].index(2) }} {{ [1, 2, 1].count(1) }} {{ messages.0.role }} {{ messages[-1].role }} {{ messages[99] }}",
        {{"messages", kMessages}}},
      C{"{{ 'héllo'[1] }} {{ 'héllo'[-1] }} {{ 'héllo'[::-1] }} {{ 'héllo'[1:3] }} {{ [1, 2, 3, 4][::2] }} {{ [1, 2, 3][-2:] }}"
        " {{ [1, 2, 3][:-1] }} {{ [1, 2, 3][5:] }} {{ (1, 2, 3)[1:] }} {{ 'abc'[10] }} {{ [1,2,3][::-2] }} {{ [1,2,3][2:0:-1] }}"},
  });
}

TEST(ChatTemplate, GlobalsAndGenerationBlocks) {
  expect_same_as_jinja2({
      C{"{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d') }}"},
      C{"{{ range(3) | list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }}"},
      C{"{% for m in messages %}{{ m.role }}: {% if m.role == 'assistant' %}{% generation %}{{ m.content }}<end>{% endgeneration %}"
        "{% else %}{{ m.content }}{% endif %}\n{% endfor %}",
        {{"messages", kMessages}}},
      C{"{% generation %}{% endgeneration %}x{% generation %}é{% endgeneration %}"},
      C{"{% if add_generation_prompt %}<assistant>{% endif %}", {{"add_generation_prompt", true}}},
  });
}

TEST(ChatTemplate, FailsWhereJinja2Fails) {
  expect_same_as_jinja2({
      C{"{{ raise_exception('no system message') }}"},
      C{"{{ 'a' + 1 }}"},
      C{"{{ 1 + 'a' }}"},
      C{"{{ 1 < 'a' }}"},
      C{"{{ undefined_v.attr }}"},
      C{"{{ undefined_v + 'x' }}"},
      C{"{{ undefined_v | int }}"},
      C{"{{ 1 / 0 }}"},
      C{"{{ 1 // 0 }}"},
      C{"{{ 5 | length }}"},
      C{"{% set a, b = [1] %}"},
      C{"{% set x = 1 %}{% set x.y = 2 %}"},
      C{"{{ [1].append(2) }}"},
      C{"{{ {'a': 1}.update({}) }}"},
      C{"{{ x | tojson }}"},
      C{"{{ range | tojson }}"},
      C{"{{ 'a'.split('') }}"},
      C{"{{ 'x'() }}"},
      C{"{{ 2 in 3 }}"},
      C{"{{ 1 in 'abc' }}"},
      C{"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"},
      C{"{% if %}{% endif %}"},
      C{"{{ 1 + }}"},
      C{"{% for x in [1] %}"},
      C{"{% endif %}"},
      C{"{{ 'never closed"},
      C{"{# never closed"},
      C{"{{ x"},
      C{"{{ (1 }}"},
      C{"{{ [1, 2 }}"},
      C{"{{ 1 | no_such_filter }}"},
      C{"{{ 1 is no_such_test }}"},
      C{"{% unknown_tag %}"},
  });
}

// Constructs jinja2 renders but tokamak does not: refused with the template's line, never rendered differently.
TEST(ChatTemplate, ConstructsOutsideTheSubsetAreRefusedWithTheirLine) {
  const std::vector<std::pair<std::string, int>> cases = {
      {"line one\n{% with x = 1 %}{{ x }}{% endwith %}", 2},
      {"a\nb\n{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}x{% endcall %}", 3},
      {"{{ '{}'.format(1) }}", 1},
      {"\n{{ '%s' % 1 }}", 2},
      {"\n\n\n{{ 'a b' | wordcount }}", 4},
      {"{% for x in [1] recursive %}{{ x }}{% endfor %}", 1},
      {"\n{{ range(*[3]) }}", 2},
      {"{% autoescape true %}x{% endautoescape %}", 1},
      {"\n{{ [1, 2] | batch(1) | list }}", 2},
      {"{% include 'other.jinja' %}", 1},
      {"\n{% import 'm.jinja' as m %}", 2},
      {"{% extends 'base.jinja' %}", 1},
      {"{% generation %}{% generation %}{% endgeneration %}{% endgeneration %}", 1},
      {"{% macro m() %}{% generation %}x{% endgeneration %}{% endmacro %}\n{{ m() }}", 1},
  };
  const std::vector<ojson> reference = [&] {
    std::vector<TemplateCase> c;
    for (const auto& [source, line] : cases) c.push_back({source});
    return jinja2_results(c);
  }();
  for (size_t i = 0; i < cases.size(); i++) {
    const ojson got = tokamak_result({cases[i].first});
    ASSERT_TRUE(got.contains("error")) << cases[i].first << " rendered as " << got.dump();
    EXPECT_NE(got["error"].get<std::string>().find(fmt::format("line {}:", cases[i].second)), std::string::npos)
        << cases[i].first << ": " << got["error"];
    // jinja2 renders the first ones: the refusal is tokamak's, not a failure of the template.
    if (i < 9) EXPECT_FALSE(reference[i].contains("error")) << cases[i].first << ": " << reference[i].dump();
  }
}

TEST(ChatTemplate, ErrorsNameTheTemplateAndLine) {
  auto error_of = [](const std::string& source) {
    try {
      ChatTemplate t(source, "my_template.jinja");
      t.render({});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of("a\n{{ raise_exception('Conversation roles must alternate') }}"),
            "chat template my_template.jinja, line 2: the template raised an exception: Conversation roles must alternate");
  EXPECT_EQ(error_of("\n\n{{ x.y }}"), "chat template my_template.jinja, line 3: 'x' is undefined");
  EXPECT_EQ(error_of("{% if true %}\n{{ 'a' + 1 }}{% endif %}"),
            "chat template my_template.jinja, line 2: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(error_of("\n{{ 1 | wordwrap }}").substr(0, 51), "chat template my_template.jinja, line 2: no filter ");
  EXPECT_EQ(error_of("{% if x %}\nno end"),
            "chat template my_template.jinja, line 2: the template ends inside a block: expected {% elif %}");
}

}  // namespace
}  // namespace tk::testing
