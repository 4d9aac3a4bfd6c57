#!/usr/bin/env python3
"""tokamak's Parquet reader against pyarrow: the pyarrow fixture set, and a differential check on random tables.

    python3 tests/hf/parquet_fixtures.py fixtures OUT_DIR
        writes the pyarrow fixtures into OUT_DIR (tests/fixtures/parquet/pyarrow is where they are committed): every
        codec, data pages v1 and v2, dictionaries on and off, the delta string encodings, page checksums, nulls,
        empty strings, unicode, several row groups and pages, string/large_string/binary/dictionary columns and a
        `messages` column (list<struct<role, content>>), each NAME.parquet with NAME.expected.json as
        tests/cpu/parquet_fixtures_test.cpp reads them (any folder under tests/fixtures/parquet is read).

    python3 tests/hf/parquet_fixtures.py differential --tokamak BUILD/tokamak --fixtures-test BUILD/parquet_fixtures_test
            [--tables 300] [--seed 1] [--keep DIR]
        writes random tables with random writer settings, reads each back with pyarrow (the expected values), and
        checks tokamak against them twice: (1) the reader, every row of every column, through parquet_fixtures_test
        run on the tables' folder (TOKAMAK_PARQUET_FIXTURES), and (2) the tokamak binary's own commands:
        train-tokenizer and prepare on the folder of .parquet files must give the same tokenizer.json and the same
        shards, byte for byte, as on a folder of .jsonl files holding pyarrow's reading of the same text columns.
        Prints one line per check and "parquet differential: N tables, all equal" at the end; exits 1 on a
        difference, naming the table and its settings.

The expected JSON: {"columns": {name: "string" | "messages"}, "rows": [{name: value}, ...]}, a null as null; a
null message struct is {"role": null, "content": null} (what tokamak's reader gives for one). A file tokamak must
refuse has "error": TEXT instead of "rows". Needs python3 with pyarrow; no network.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

PIECES = ["the", "river", "ran", "quietly", "é", "naïve", "日本語", "текст", "عربى", "🙂", "👩‍💻", "e\u0301", "\t", "\n",
          " ", '"quoted"', "\\", "x" * 120]
CODECS = ["NONE", "SNAPPY", "GZIP", "BROTLI", "ZSTD", "LZ4"]
ROLES = ["system", "user", "assistant", "tool"]


def texts(rnd, n, null_share, long_share=0.03):
    out = []
    for i in range(n):
        r = rnd.random()
        if r < null_share:
            out.append(None)
        elif r < null_share + 0.08:
            out.append("")
        elif r < null_share + 0.25:
            out.append(f"repeated text {i % 3}")
        else:
            words = rnd.randint(1, 150 if rnd.random() < long_share else 12)
            out.append(f"{i}: " + " ".join(rnd.choice(PIECES) for _ in range(words)))
    return out


def conversations(rnd, n, null_share):
    out = []
    for _ in range(n):
        if rnd.random() < null_share:
            out.append(None)
            continue
        turns = []
        for _ in range(rnd.randint(0, 4)):
            if rnd.random() < 0.04:
                turns.append(None)  # a null struct
                continue
            role = None if rnd.random() < 0.03 else rnd.choice(ROLES)
            content = None if rnd.random() < 0.1 else texts(rnd, 1, 0.0)[0]
            turns.append({"role": role, "content": content})
        out.append(turns)
    return out


def as_text(v):
    return v.decode("utf-8") if isinstance(v, bytes) else v


def expected_rows(table, columns):
    """pyarrow's reading of `table`'s columns, in the fixtures' JSON form."""
    rows = []
    data = {name: table.column(name).to_pylist() for name in columns}
    for i in range(table.num_rows):
        row = {}
        for name, kind in columns.items():
            v = data[name][i]
            if kind == "messages" and v is not None:
                v = [{"role": None, "content": None} if m is None else
                     {"role": as_text(m["role"]), "content": as_text(m["content"])} for m in v]
            elif kind == "string":
                v = as_text(v)
            row[name] = v
        rows.append(row)
    return rows


def write_expected(path, columns, rows=None, error=None):
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"columns": ' + json.dumps(columns) + ", ")
        if error is not None:
            f.write('"error": ' + json.dumps(error) + "}\n")
        else:
            f.write('"rows": [\n' + ",\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n]}\n")


def hadoop_lz4(path):
    """Whether a column chunk of the file is compressed with the Hadoop-framed LZ4 of old writers, which tokamak
    refuses. pyarrow writes LZ4_RAW for compression="LZ4" and names it "LZ4" when reading; the Hadoop framing it
    names otherwise."""
    import pyarrow.parquet as pq
    md = pq.ParquetFile(path).metadata
    names = {md.row_group(g).column(c).compression for g in range(md.num_row_groups) for c in range(md.num_columns)}
    return bool(names & {"LZ4_HADOOP", "UNKNOWN"})


def write_fixture(out_dir, name, table, columns, **settings):
    """Writes NAME.parquet with pyarrow's settings and NAME.expected.json from pyarrow's reading of the file."""
    import pyarrow.parquet as pq
    path = os.path.join(out_dir, name + ".parquet")
    pq.write_table(table, path, **settings)
    read = pq.read_table(path)
    expected = os.path.join(out_dir, name + ".expected.json")
    if hadoop_lz4(path):  # refused by name
        write_expected(expected, columns, error="the compression codec LZ4 is not one tokamak reads")
    else:
        write_expected(expected, columns, expected_rows(read, columns))
    return path


def message_type(pa, compliant=True):
    element = pa.struct([("role", pa.string()), ("content", pa.string())])
    return pa.list_(pa.field("element" if compliant else "item", element))


def make_fixtures(out_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq
    os.makedirs(out_dir, exist_ok=True)
    rnd = random.Random(3)
    n = 0
    for codec in CODECS:
        for version in ["1.0", "2.0"]:
            for dictionary in [True, False]:
                name = f"text_{codec.lower()}_v{version[0]}_{'dict' if dictionary else 'plain'}"
                table = pa.table({"text": pa.array(texts(rnd, 90, 0.1), pa.string())})
                write_fixture(out_dir, name, table, {"text": "string"}, compression=codec, data_page_version=version,
                              use_dictionary=dictionary, row_group_size=40, data_page_size=512,
                              write_page_checksum=True)
                n += 1
    for encoding in ["DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY", "PLAIN"]:
        for version in ["1.0", "2.0"]:
            name = f"text_{encoding.lower()}_v{version[0]}"
            table = pa.table({"text": pa.array(texts(rnd, 120, 0.1), pa.string())})
            write_fixture(out_dir, name, table, {"text": "string"}, compression="ZSTD", data_page_version=version,
                          use_dictionary=False, column_encoding={"text": encoding}, row_group_size=50,
                          data_page_size=700)
            n += 1
    kinds = {"large_string": pa.large_string(), "binary": pa.binary(),
             "dictionary": pa.dictionary(pa.int32(), pa.string())}
    for kind, typ in kinds.items():
        values = texts(rnd, 80, 0.1)
        array = pa.array([None if v is None else v.encode() for v in values], typ) if kind == "binary" else \
            pa.array(values, pa.string()).cast(typ)
        write_fixture(out_dir, f"text_{kind}", pa.table({"id": pa.array(range(80)), "text": array}),
                      {"text": "string"}, compression="SNAPPY", row_group_size=30)
        n += 1
    # A dictionary larger than its page limit: the writer falls back to plain pages within a chunk.
    write_fixture(out_dir, "text_dictionary_fallback", pa.table({"text": pa.array(texts(rnd, 200, 0.05), pa.string())}),
                  {"text": "string"}, dictionary_pagesize_limit=200, data_page_size=300, compression="GZIP")
    write_fixture(out_dir, "text_required", pa.table({"text": pa.array(texts(rnd, 40, 0.0), pa.string())},
                                                     schema=pa.schema([pa.field("text", pa.string(), False)])),
                  {"text": "string"}, compression="ZSTD")
    n += 2
    for version in ["1.0", "2.0"]:
        for compliant in [True, False]:
            convs = conversations(rnd, 70, 0.08)
            table = pa.table({"prompt": pa.array(texts(rnd, 70, 0.2), pa.string()),
                              "messages": pa.array(convs, message_type(pa, compliant))})
            write_fixture(out_dir, f"messages_v{version[0]}_{'element' if compliant else 'item'}", table,
                          {"prompt": "string", "messages": "messages"}, data_page_version=version,
                          compression="ZSTD", row_group_size=25, data_page_size=400,
                          use_compliant_nested_type=compliant, write_page_checksum=True)
            n += 1
    # Refusals tokamak names: a text column of another type, a list nested in a list.
    nested = pa.array([[[{"role": "user", "content": "hi"}]]], pa.list_(message_type(pa)))
    for name, table, columns, error in [
            ("error_int_text", pa.table({"text": pa.array([1, 2, 3], pa.int64())}), {"text": "string"},
             'column "text" is INT64'),
            ("error_nested_lists", pa.table({"messages": nested}), {"messages": "messages"},
             'column "messages" nests lists deeper than one level')]:
        pq.write_table(table, os.path.join(out_dir, name + ".parquet"))
        write_expected(os.path.join(out_dir, name + ".expected.json"), columns, error=error)
    print(f"parquet fixtures: {n + 2} files written by pyarrow {pa.__version__} into {out_dir}")


def random_settings(rnd):
    version = rnd.choice(["1.0", "2.0"])
    s = {"compression": rnd.choice(CODECS), "data_page_version": version,
         "row_group_size": rnd.choice([1, 3, 17, 64, 1000]), "data_page_size": rnd.choice([64, 300, 4096, 1 << 20]),
         "write_statistics": rnd.random() < 0.5, "write_page_checksum": rnd.random() < 0.5,
         "use_compliant_nested_type": rnd.random() < 0.7, "write_batch_size": rnd.choice([1, 7, 1024])}
    if s["compression"] in ("GZIP", "ZSTD", "BROTLI") and rnd.random() < 0.5:
        s["compression_level"] = {"GZIP": rnd.randint(1, 9), "ZSTD": rnd.randint(1, 19), "BROTLI": rnd.randint(1, 11)}[
            s["compression"]]
    if rnd.random() < 0.4:
        s["use_dictionary"] = False
        s["column_encoding"] = {"text": rnd.choice(["PLAIN", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY"])}
    else:
        s["use_dictionary"] = True
        if rnd.random() < 0.3:
            s["dictionary_pagesize_limit"] = rnd.choice([64, 256])
    return s


def random_table(rnd, pa):
    rows = rnd.choice([1, 2, 5, 40, 300])
    null_share = rnd.choice([0.0, 0.1, 0.5, 1.0])
    typ = rnd.choice([pa.string(), pa.large_string(), pa.binary()])
    values = texts(rnd, rows, null_share, long_share=rnd.choice([0.0, 0.05, 0.3]))
    text = pa.array([None if v is None else v.encode() for v in values], typ) if typ == pa.binary() else \
        pa.array(values, typ)
    nullable = null_share > 0 or rnd.random() < 0.7
    fields = [pa.field("text", typ, nullable)]
    arrays = [text]
    columns = {"text": "string"}
    if rnd.random() < 0.6:
        fields.append(pa.field("messages", message_type(pa)))
        arrays.append(pa.array(conversations(rnd, rows, rnd.choice([0.0, 0.1, 0.5])), message_type(pa)))
        columns["messages"] = "messages"
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields)), columns


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-4000:]}{r.stderr[-4000:]}")
    return r


def same_files(a, b, suffix):
    names = sorted(f for f in os.listdir(a) if f.endswith(suffix))
    if names != sorted(f for f in os.listdir(b) if f.endswith(suffix)):
        return False
    return all(open(os.path.join(a, f), "rb").read() == open(os.path.join(b, f), "rb").read() for f in names)


def differential(args):
    import pyarrow as pa
    import pyarrow.parquet as pq
    rnd = random.Random(args.seed)
    work = args.keep or tempfile.mkdtemp(prefix="tokamak-parquet-")
    tables, parquets, jsonls = (os.path.join(work, d) for d in ("tables", "parquet", "jsonl"))
    for d in (tables, parquets, jsonls):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    settings_of = {}
    refused = 0
    for i in range(args.tables):
        table, columns = random_table(rnd, pa)
        settings = random_settings(rnd)
        name = f"t{i:04d}"
        settings_of[name] = settings
        path = write_fixture(tables, name, table, columns, **settings)
        if hadoop_lz4(path):
            refused += 1
            continue
        # The text column for prepare and train-tokenizer: the same file beside pyarrow's reading of it as JSON Lines
        # (a null is read as "", which both skip as an empty document).
        shutil.copy(path, os.path.join(parquets, name + ".parquet"))
        with open(os.path.join(jsonls, name + ".jsonl"), "w", encoding="utf-8") as f:
            for v in pq.read_table(path, columns=["text"]).column("text").to_pylist():
                f.write(json.dumps({"text": as_text(v) or ""}, ensure_ascii=False) + "\n")
    print(f"parquet differential: {args.tables} tables written by pyarrow {pa.__version__} into {tables} "
          f"({refused} with Hadoop LZ4, which tokamak must refuse)")

    env = dict(os.environ, TOKAMAK_PARQUET_FIXTURES=tables)
    r = subprocess.run([args.fixtures_test, "--gtest_filter=ParquetFixtures.EveryFixture*:ParquetFixtures.TextColumns*"],
                       capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        failed = sorted({line.split(tables + "/")[1].split(".parquet")[0] for line in r.stdout.splitlines()
                         if tables + "/" in line})
        for name in failed[:10]:
            print(f"  {name}: {json.dumps(settings_of.get(name))}")
        print(r.stdout[-6000:])
        print("parquet differential: the reader differs from pyarrow")
        return 1
    print("parquet differential: reader: every row of every table equal to pyarrow's reading")

    out = {}
    for kind, inputs in (("parquet", parquets), ("jsonl", jsonls)):
        tok, data = os.path.join(work, f"tokenizer_{kind}"), os.path.join(work, f"data_{kind}")
        run([args.tokamak, "train-tokenizer", "--input", inputs, "--vocab-size", "400", "--out", tok])
        run([args.tokamak, "prepare", "--tokenizer", tok, "--input", inputs, "--out", data, "--shard-tokens", "20000"])
        out[kind] = (tok, data)
    if not same_files(out["parquet"][0], out["jsonl"][0], "tokenizer.json"):
        print("parquet differential: train-tokenizer learned another vocabulary from the .parquet files")
        return 1
    if not same_files(out["parquet"][1], out["jsonl"][1], ".bin"):
        print("parquet differential: prepare made other shards of the .parquet files than of the .jsonl files")
        return 1
    print("parquet differential: tokamak train-tokenizer and prepare: the same tokenizer.json and shards from "
          ".parquet as from .jsonl")
    print(f"parquet differential: {args.tables} tables, all equal")
    if not args.keep:
        shutil.rmtree(work)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fixtures", help="write the pyarrow fixture set")
    f.add_argument("out_dir")
    d = sub.add_parser("differential", help="random tables: tokamak against pyarrow")
    d.add_argument("--tokamak", required=True)
    d.add_argument("--fixtures-test", required=True, help="the build's parquet_fixtures_test")
    d.add_argument("--tables", type=int, default=300)
    d.add_argument("--seed", type=int, default=1)
    d.add_argument("--keep", help="work in this folder and keep it")
    args = ap.parse_args()
    if args.command == "fixtures":
        make_fixtures(args.out_dir)
        return 0
    return differential(args)


if __name__ == "__main__":
    sys.exit(main())
