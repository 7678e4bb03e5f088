"""Step-1 measurement of issue 15, goal 5 (see bench/SERVE_SERVERS.md): the same package-document
GET, the bench's own wrk setup (-t2 -c32, then again beside 300 idle keep-alive connections), on
several servers and apps in one run. Not part of `make bench`: granian is not a dependency.

    pip install granian==2.8.7
    PYTHONPATH=$PWD python bench/serve_probe/measure.py nginx waitress whello wmin wcache g1 g2 graw1 glean1 glean2 gmin1 ghello nginx
"""
import os, sys, subprocess, time, tempfile, shutil, json
from pathlib import Path
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
from bench import servers
from bench.synthetic import CACHE_DIR, SCALES, ensure_registry
from bench.bench_serve import _document_name, _check, _with_idle

GRANIAN = str(Path(sys.executable).with_name("granian"))
SECONDS = int(os.environ.get("SF_SECONDS", "5"))
which = sys.argv[1:] or ["waitress", "g1", "g2", "nginx"]

def granian(workdir, config, extra, target="apps:make"):
    port = servers.free_port()
    env = dict(os.environ, SF_CONFIG=str(config), PYTHONPATH=f"{ROOT}:{HERE}")
    log = open(workdir / f"granian-{port}.log", "wb")
    p = subprocess.Popen([GRANIAN, "--interface", "wsgi", "--factory", "--host", "127.0.0.1", "--port", str(port), "--no-ws", *extra, target],
                         env=env, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    servers.wait_for_port(port, p)
    return p, f"http://127.0.0.1:{port}/"

def run(label, url, name, results):
    servers.wrk(url + name, seconds=1)
    r = servers.wrk(url + name, seconds=SECONDS)
    ri = _with_idle(url + name, SECONDS)
    results[label] = (r, ri)
    print(f"{label:40s} {r['rps']:9.0f} req/s p99 {r.get('p99_ms',0):6.1f} ms err {r['non_2xx']+r['socket_errors']:.0f} | idle: {ri['rps']:9.0f} p99 {ri.get('p99_ms',0):6.1f} answered {ri['idle_answered']:.0f} err {ri['non_2xx']+ri['socket_errors']:.0f}", flush=True)

if __name__ != '__main__':
    raise SystemExit('run as a script')
content = ensure_registry(SCALES[1_000])
name = _document_name()
command = servers.registry_gen_command()
results = {}
scratch = Path(tempfile.mkdtemp(prefix="serve-probe-", dir=CACHE_DIR))
os.chmod(scratch, 0o755)
with servers.registry_gen_serve(command, content, scratch / "serve") as (serve_url, out):
    print("size", _check(serve_url + name), "load", os.getloadavg(), flush=True)
    config = scratch / "g.yaml"
    config.write_text(f"content_dir: {content}\nout_dir: {out}\ndata_dir: {scratch/'gdata'}\n")
    for w in which:
        if w == "waitress":
            run("waitress (registry-gen serve, 8 thr)", serve_url, name, results)
        elif w in ("wmin", "wcache"):
            port = servers.free_port()
            fn = {"wmin": "minimal", "wcache": "cached"}[w]
            p = subprocess.Popen([sys.executable, "-c", f"import sys; sys.path.insert(0,'{HERE}'); import apps, waitress; waitress.serve(apps.{fn}(), host='127.0.0.1', port={port}, threads=8, connection_limit=1000, _quiet=True)"], env=dict(os.environ, SF_OUT=str(out)))
            servers.wait_for_port(port, p)
            try:
                run(f"waitress {fn} 8 thr", f"http://127.0.0.1:{port}/", name, results)
            finally:
                servers.stop(p)
        elif w == "whello":
            port = servers.free_port()
            p = subprocess.Popen([sys.executable, "-c", f"import sys; sys.path.insert(0,'{HERE}'); import apps, waitress; waitress.serve(apps.hello(), host='127.0.0.1', port={port}, threads=8, connection_limit=1000, _quiet=True)"])
            servers.wait_for_port(port, p)
            try:
                run("waitress hello-world 8 thr", f"http://127.0.0.1:{port}/", "", results)
            finally:
                servers.stop(p)
        elif w == "nginx":
            with servers.nginx(out, scratch / "nginx") as nurl:
                run("nginx", nurl, name, results)
        else:
            specs = {
                "g1": ["--workers", "1"],
                "g1b4": ["--workers", "1", "--blocking-threads", "4"],
                "g1b8": ["--workers", "1", "--blocking-threads", "8"],
                "g2": ["--workers", "2"],
                "g2b4": ["--workers", "2", "--blocking-threads", "4"],
                "g1st": ["--workers", "1", "--runtime-mode", "st"],
                "g1b2": ["--workers", "1", "--blocking-threads", "2"],
                "g1b1": ["--workers", "1", "--blocking-threads", "1"],
                "g2b1": ["--workers", "2", "--blocking-threads", "1"],
                "g2b2": ["--workers", "2", "--blocking-threads", "2"],
                "ghello": ["--workers", "1"],
                "ghello2": ["--workers", "2"],
                "gmin2": ["--workers", "2"], "graw1": ["--workers", "1"], "graw2": ["--workers", "2"], "glean1": ["--workers", "1"], "glean2": ["--workers", "2"], "glean1rt2": ["--workers", "1", "--runtime-threads", "2"], "glean1b2": ["--workers", "1", "--blocking-threads", "2"], "gcache2": ["--workers", "2"], "gmin1": ["--workers", "1"],
                "gstatic": ["--workers", "1", "--static-path-route", "/", "--static-path-mount", str(out), "--static-path-dir-to-file", "index.html"],
            }
            target = "apps:hello" if w.startswith("ghello") else "apps:make"
            if w.startswith(("gmin", "gcache", "graw", "glean")):
                target = {"gmin": "apps:minimal", "gcac": "apps:cached", "graw": "apps:raw", "glea": "apps:lean"}[w[:4]]
                os.environ["SF_OUT"] = str(out)
            p, url = granian(scratch, config, specs[w], target)
            try:
                run(f"granian {w} {target} {' '.join(specs[w][:4])}", url, "" if w.startswith("ghello") else name, results)
            finally:
                servers.stop(p)
print("load end", os.getloadavg())
shutil.rmtree(scratch, ignore_errors=True)
