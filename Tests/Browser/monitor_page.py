"""Drives the sync monitor page in a real headless Chromium (Debian's chromium + chromium-driver, selenium).

Run by MonitorBrowserTests.swift, which owns the server and its clock. The two talk over stdin/stdout:
this script prints "STEP <name>" when it needs the server's clock moved, and waits for a line on stdin.
Any failed check exits non-zero with the reason on stderr.
"""
import argparse
import html
import http.server
import sys
import threading
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By

MESSAGE = ("No devices have synced in the last 30 minutes. If your event is live, "
           "this may indicate a network problem at the venue.")


def fail(reason):
    print(f"FAILED: {reason}", file=sys.stderr, flush=True)
    sys.exit(1)


def check(condition, reason):
    if not condition:
        fail(reason)


def step(name):
    print(f"STEP {name}", flush=True)
    if not sys.stdin.readline():
        fail("the test ended before the step " + name)


def wait_for(predicate, reason, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if predicate():
                return
        except Exception:
            pass
        time.sleep(0.2)
    fail(reason)


# A device not heard from: one test id, its state as an attribute.
STALE = '[data-testid="sync-monitor-stale-pill"][data-state="stale"]'
OFFLINE = '[data-testid="sync-monitor-stale-pill"][data-state="offline"]'


def by_testid(driver, testid):
    return driver.find_elements(By.CSS_SELECTOR, f'[data-testid="{testid}"]')


def luminance(rgba):
    parts = [float(x) for x in rgba[rgba.index("(") + 1:rgba.index(")")].split(",")[:3]]
    channels = []
    for value in parts:
        c = value / 255
        channels.append(c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4)
    return 0.2126 * channels[0] + 0.7152 * channels[1] + 0.0722 * channels[2]


def contrast(pill):
    fg, bg = luminance(pill["color"]), luminance(pill["background"])
    light, dark = max(fg, bg), min(fg, bg)
    return (light + 0.05) / (dark + 0.05)


def pills(driver, css):
    """Text and colours of every element matching css, read in one script call: the page replaces its
    body as it refreshes itself, so element references held across calls can go stale."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => ({text: e.innerText,"
        " color: getComputedStyle(e).color, background: getComputedStyle(e).backgroundColor}))", css)


def main_text(driver):
    return driver.execute_script("return document.querySelector('main').innerText")


def settled(action, attempts=5):
    """Runs action again if the self-refreshing page replaced an element it was reading."""
    for attempt in range(attempts):
        try:
            return action()
        except StaleElementReferenceException:
            if attempt == attempts - 1:
                raise


def another_site(pages):
    """Serves pages (path -> HTML) at http://localhost:PORT: another site than the monitor's 127.0.0.1."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = pages.get(self.path, "").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *arguments):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://localhost:{server.server_address[1]}"


def auto_submit(action, fields):
    inputs = "".join(f'<input type="hidden" name="{name}" value="{html.escape(value)}">' for name, value in fields.items())
    return (f'<!doctype html><form method="post" action="{html.escape(action)}">{inputs}</form>'
            '<script>document.forms[0].submit()</script>')


def signed_in(driver, url):
    driver.get(url + "/admin/monitor?event=gala&refresh=1")
    return bool(by_testid(driver, "sync-monitor-page"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--organizer", required=True)
    parser.add_argument("--staff", required=True)
    parser.add_argument("--other-organizer", required=True, help="another tenant's organizer token")
    parser.add_argument("--other-link", required=True, help="a sign-in link of another tenant's organizer")
    args = parser.parse_args()

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        run(driver, args)
    finally:
        driver.quit()
    print("DONE", flush=True)


def sign_in(driver, url, token):
    driver.get(url + "/admin/sign-in")
    field = driver.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token)
    field.submit()


def run(driver, args):
    url = args.url
    # Without a session the page sends the organizer to sign in.
    driver.get(url + "/admin/monitor")
    check(by_testid(driver, "sync-monitor-sign-in"), "the monitor did not ask to sign in")

    # Login CSRF: a page on another site cannot sign this browser in as someone else, by form or by link.
    site = another_site({
        "/login-form": auto_submit(url + "/admin/session", {"token": args.other_organizer, "csrf": "guessed"}),
        "/login-link": f'<!doctype html><script>location.href = {args.other_link!r}</script>',
        "/logout": auto_submit(url + "/admin/sign-out", {"csrf": "guessed"}),
    })
    driver.get(site + "/login-form")
    wait_for(lambda: driver.current_url.startswith(url), "the other site's form did not post")
    check(not signed_in(driver, url), "a form on another site signed the browser in")
    driver.get(site + "/login-link")
    wait_for(lambda: by_testid(driver, "sync-monitor-confirm"), "a sign-in link did not ask before signing in")
    check(not signed_in(driver, url), "a sign-in link opened by another site signed the browser in")
    sign_in(driver, url, "not-a-token")
    check("invalid or expired" in driver.page_source, "a bad token was not refused")
    sign_in(driver, url, args.staff)
    check("needs an organizer token" in driver.page_source, "a staff token was not refused")
    sign_in(driver, url, args.organizer)
    check(by_testid(driver, "sync-monitor-page"), "signing in did not open the monitor")

    # The session is a secure, HTTP-only, same-site cookie that page scripts cannot read.
    cookies = {c["name"]: c for c in driver.get_cookies()}
    session = cookies.get("outpost_session")
    check(session is not None, "no session cookie")
    check(session.get("httpOnly") and session.get("secure") and session.get("sameSite") == "Strict",
          f"the session cookie is not Secure/HttpOnly/SameSite=Strict: {session}")
    check("outpost_session" not in driver.execute_script("return document.cookie"), "scripts can read the session")

    # Logout CSRF: a page on another site cannot sign the organizer out.
    driver.get(site + "/logout")
    wait_for(lambda: driver.current_url.startswith(url), "the other site's sign-out form did not post")
    check(signed_in(driver, url), "a form on another site signed the organizer out")

    driver.get(url + "/admin/monitor?event=gala&refresh=1")
    rows = by_testid(driver, "sync-monitor-device-row")
    check(len(rows) == 2, f"expected 2 device rows, got {len(rows)}")
    check(not by_testid(driver, "sync-monitor-stale-pill"), "a fresh device shows as stale")
    check(not by_testid(driver, "sync-monitor-empty-state"), "the empty state shows while devices report")
    # The event is shown by its name and picked by its id.
    check("Gala" in driver.title, f"the title does not name the event: {driver.title}")
    picked = driver.find_element(By.CSS_SELECTOR, "#event option[selected]")
    check(picked.get_attribute("value") == "gala" and picked.text == "Gala", "the picker does not show the event's name")
    # What a device or organizer typed is shown as text, never run as markup.
    check("<img src=x onerror=window.__xss=1>" in main_text(driver),
          "the staff name was not shown literally")
    check(driver.execute_script("return window.__xss === undefined"), "markup from a staff name ran")
    charts = driver.find_elements(By.CSS_SELECTOR, '[data-testid="sync-monitor-device-row"] svg.chart rect')
    check(len(charts) == 24, f"expected 12 chart bars per device, got {len(charts)}")
    failures = pills(driver, '[data-testid="sync-monitor-failure"]')
    check(len(failures) == 1 and "n-lost" in failures[0]["text"], "the persistent failure is not listed")
    for pill in pills(driver, ".pill.ok"):
        check(contrast(pill) >= 4.5, f"the OK pill's contrast is {contrast(pill):.2f}")
    loaded_at = driver.execute_script("return window.outpostMonitorLoadedAt")

    # Ten minutes without a report: yellow Stale pills appear, without a reload.
    step("stale")
    wait_for(lambda: len(pills(driver, STALE)) == 2, "no Stale pills after 10 minutes")
    check(driver.execute_script("return window.outpostMonitorLoadedAt") == loaded_at, "the page reloaded")
    for pill in pills(driver, STALE):
        check(pill["text"] == "Stale", "the stale pill does not say Stale")
        check(contrast(pill) >= 4.5, f"the Stale pill's contrast is {contrast(pill):.2f}")
    check("10 min ago" in main_text(driver) or "11 min ago" in main_text(driver),
          "the last-seen time is not shown")

    # Thirty minutes: red Offline pills, and the empty state with the urgent-message link.
    step("offline")
    wait_for(lambda: len(pills(driver, OFFLINE)) == 2, "no Offline pills after 30 minutes")
    check(not pills(driver, STALE), "Stale pills remain after 30 minutes")
    for pill in pills(driver, OFFLINE):
        check(pill["text"] == "Offline", "the offline pill does not say Offline")
        check(contrast(pill) >= 4.5, f"the Offline pill's contrast is {contrast(pill):.2f}")
    def empty_state():
        empty = by_testid(driver, "sync-monitor-empty-state")
        check(len(empty) == 1 and MESSAGE in empty[0].text, "the empty state's message is missing")
        href = empty[0].find_element(By.LINK_TEXT, "Send urgent message to staff").get_attribute("href")
        check(href.startswith("mailto:ops@example.org"), f"the urgent link is {href}")
    settled(empty_state)
    check(driver.execute_script("return window.outpostMonitorLoadedAt") == loaded_at, "the page reloaded")

    # At phone width the rows still show, with no sideways scrolling.
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    driver.get(url + "/admin/monitor?event=gala&refresh=1")
    width = driver.execute_script("return document.documentElement.scrollWidth")
    check(width <= 391, f"the page is {width}px wide at a 390px phone width")
    def rows_shown():
        rows = by_testid(driver, "sync-monitor-device-row")
        check(len(rows) == 2 and all(row.is_displayed() for row in rows), "rows are hidden at phone width")
    settled(rows_shown)


if __name__ == "__main__":
    main()
