"""The source interface's languages: complete catalogs, compiled catalogs in step, negotiation."""
from __future__ import annotations

import gettext
import io
import os
import re

from babel.messages.extract import DEFAULT_KEYWORDS, extract_from_dir
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from twisted.trial import unittest

from deaddrop.web.source import i18n
from deaddrop.web.source._browser import is_tor_browser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PLACEHOLDER = re.compile(r"\{\w+\}")


def used_messages() -> dict[str | tuple[str, str], str]:
    """Every message id the source interface's code uses -> where (file:line), read from the
    code itself with Babel's extractor and the same mapping as ``scripts/i18n extract``."""
    found: dict = {}
    for filename, lineno, message, _comments, _context in extract_from_dir(
            os.path.join(ROOT, "deaddrop", "web", "source"), method_map=[("**.py", "python")],
            keywords={**DEFAULT_KEYWORDS, "Np_": (1, 2)}):
        found.setdefault(message, f"{filename}:{lineno}")
    return found


def _catalog(code: str):
    path = os.path.join(i18n.LOCALE_DIR, code, "LC_MESSAGES", "messages.po")
    with open(path, "rb") as f:
        return read_po(f, locale=code)


class CatalogTests(unittest.TestCase):
    def test_the_code_uses_messages(self):
        """The extractor sees the code's strings (so the checks below are not vacuous)."""
        used = used_messages()
        self.assertGreater(len(used), 100)
        self.assertIn("How to stay safe", used)
        self.assertIn("The drop box is busy. Nothing was lost; please try again in a minute.", used)
        self.assertIn(("{n} new reply", "{n} new replies"), used)

    def test_every_language_translates_every_used_message(self):
        used = used_messages()
        problems = []
        for code in i18n.TRANSLATED:
            catalog = _catalog(code)
            for msgid, where in used.items():
                key = msgid[0] if isinstance(msgid, tuple) else msgid
                message = catalog.get(key)
                if message is None:
                    problems.append(f"{code}: missing {key!r} ({where})")
                    continue
                if message.fuzzy:
                    problems.append(f"{code}: fuzzy {key!r}")
                forms = message.string if isinstance(message.string, tuple) else (message.string,)
                if isinstance(msgid, tuple) and len(forms) != catalog.num_plurals:
                    problems.append(f"{code}: {len(forms)} plural forms, needs {catalog.num_plurals}: {key!r}")
                wanted = set(_PLACEHOLDER.findall(msgid[-1] if isinstance(msgid, tuple) else msgid))
                for form in forms:
                    found = set(_PLACEHOLDER.findall(form))
                    # A plural form may say its count in words (Arabic's "one" and "two" forms).
                    count_in_words = isinstance(msgid, tuple) and found | {"{n}"} == wanted | {"{n}"}
                    if not form:
                        problems.append(f"{code}: untranslated {key!r} ({where})")
                    elif found != wanted and not count_in_words:
                        problems.append(f"{code}: placeholders {form!r} != {sorted(wanted)}")
        self.assertEqual(problems, [], "\n".join(problems))

    def test_compiled_catalogs_match_their_sources(self):
        """The committed .mo files are what ``scripts/i18n compile`` makes of the .po files."""
        for code in i18n.TRANSLATED:
            compiled = io.BytesIO()
            write_mo(compiled, _catalog(code), use_fuzzy=False)
            compiled.seek(0)
            expected = gettext.GNUTranslations(compiled)._catalog
            path = os.path.join(i18n.LOCALE_DIR, code, "LC_MESSAGES", "messages.mo")
            with open(path, "rb") as f:
                committed = gettext.GNUTranslations(f)._catalog
            self.assertEqual(committed, expected, f"{code}: run scripts/i18n compile")

    def test_the_codename_word_is_the_same_throughout_each_language(self):
        """The word for "codename" (as on the generate page) appears wherever English says codename."""
        word = {"es": "nombre en clave", "fr": "nom de code", "de": "codename", "pt": "nome de código",
                "ru": "кодов", "tr": "kod ad", "ar": "اسم", "fa": "نام رمز"}
        for code in i18n.TRANSLATED:
            catalog = _catalog(code)
            for message in catalog:
                if not message.id or isinstance(message.id, tuple) or "codename" not in message.id.lower():
                    continue
                self.assertIn(word[code], message.string.lower(), f"{code}: {message.string!r}")

    def test_every_language_says_the_codename_words_stay_english(self):
        key = ("The codename words are English words, whatever language you use here. Capital letters "
               "do not matter, and spaces, commas, hyphens, dots or new lines may separate the words.")
        self.assertIn(key, used_messages())
        for code in i18n.TRANSLATED:
            self.assertTrue(_catalog(code).get(key).string)

    def test_right_to_left_languages(self):
        self.assertEqual({c for c, (_n, d) in i18n.LANGUAGES.items() if d == "rtl"}, {"ar", "fa"})
        self.assertEqual(len(i18n.TRANSLATED), 8)


class _FakeRequest:
    def __init__(self, cookie: bytes | None = None, accept: bytes | None = None):
        self.cookie, self.accept = cookie, accept

    def getCookie(self, name):
        return self.cookie if name == b"dd_lang" else None

    def getHeader(self, name):
        return self.accept if name == b"accept-language" else None


class NegotiationTests(unittest.TestCase):
    def test_accept_language(self):
        cases = {
            None: None, "": None, "xx, yy;q=0.5": None,
            "es-MX,es;q=0.9,en;q=0.5": "es", "pt-BR": "pt", "en-US,en;q=0.9,ar;q=0.8": "en",
            "de;q=0.2, fa;q=0.9": "fa", "ar;q=0, fr": "fr", "FR-ca": "fr", "ru;q=bad, tr": "tr",
            "zh-CN, tr;q=0.4, *;q=0.1": "tr",
        }
        for header, expected in cases.items():
            self.assertEqual(i18n.from_accept_language(header), expected, header)

    def test_an_absurd_header_costs_little_and_is_read_only_in_part(self):
        self.assertIsNone(i18n.from_accept_language("xx," * 100_000 + "es"))

    def test_the_menu_cookie_wins_over_the_browser(self):
        self.assertEqual(i18n.negotiate(_FakeRequest(b"fa", b"de")).code, "fa")
        self.assertEqual(i18n.negotiate(_FakeRequest(None, b"de")).code, "de")
        self.assertEqual(i18n.negotiate(_FakeRequest(b"../../etc", b"de")).code, "de")
        self.assertEqual(i18n.negotiate(_FakeRequest(None, None)).code, "en")

    def test_translations_are_used(self):
        self.assertEqual(i18n.language("es").gettext("Log out"), "Cerrar sesión")
        self.assertEqual(i18n.language("ar").direction, "rtl")
        self.assertEqual(i18n.language("ru").ngettext("{n} new reply", "{n} new replies", 5), "{n} новых ответов")
        self.assertEqual(i18n.language("en").gettext("Log out"), "Log out")


class TorBrowserTests(unittest.TestCase):
    TOR_BROWSER = [
        "Mozilla/5.0 (Windows NT 10.0; rv:128.0) Gecko/20100101 Firefox/128.0",
        "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10.15; rv:115.0) Gecko/20100101 Firefox/115.0",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:109.0) Gecko/20100101 Firefox/115.0",
        "Mozilla/5.0 (Android 10; Mobile; rv:128.0) Gecko/128.0 Firefox/128.0",
    ]
    OTHERS = [
        None, "", "curl/8.5.0",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "Version/17.5 Mobile/15E148 Safari/604.1",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 "
        "Safari/537.36 Edg/131.0.0.0",
        "Mozilla/5.0 (Android 14; Mobile; rv:128.0) Gecko/128.0 Firefox/128.0",  # Firefox: real Android version
        "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0 Extra",
    ]

    def test_tor_browser_user_agents(self):
        for ua in self.TOR_BROWSER:
            self.assertTrue(is_tor_browser(ua), ua)
            self.assertTrue(is_tor_browser(ua.encode()), ua)

    def test_other_user_agents(self):
        for ua in self.OTHERS:
            self.assertFalse(is_tor_browser(ua), ua)


class JournalistExtractionTests(unittest.TestCase):
    """The journalist interface stays English, but its strings can be extracted as they stand."""

    def test_the_journalist_pages_strings_are_extractable(self):
        from deaddrop.web.journalist._extract import extract_tag_strings, fstrings_in

        found = set()
        for name in ("pages.py", "app.py", "auth.py", "sources.py", "downloads.py", "account.py", "users.py",
                     "settings.py"):
            path = os.path.join(ROOT, "deaddrop", "web", "journalist", name)
            with open(path, "rb") as f:
                found |= {message for _l, _f, message, _c in extract_tag_strings(f, {}, [], {})}
            with open(path, encoding="utf-8") as f:
                fstrings_in(f.read())  # parses; the count is for whoever translates it next
        for expected in ("Instance settings", "Sources", "Add a user", "Settings saved."):
            self.assertIn(expected, found)
        self.assertFalse({m for m in found if m in ("POST", "hidden", "ok", "warning")})
        self.assertGreater(len(found), 60)


class ArabicPluralTests(unittest.TestCase):
    """Issue 17 §7: Arabic counts follow Babel's plural rule (six forms), and one and two are said
    in words ("5 دقيقة" and "و1 مستند" were wrong)."""

    def test_the_catalogs_plural_rule_is_babels(self):
        from babel.messages.plurals import get_plural

        for code in i18n.TRANSLATED:
            rule = get_plural(code)
            catalog = _catalog(code)
            self.assertEqual((catalog.num_plurals, catalog.plural_expr), (rule.num_plurals, rule.plural_expr), code)
        self.assertEqual(get_plural("ar").num_plurals, 6)

    def test_one_and_two_documents_and_replies_in_arabic(self):
        from deaddrop.web.source import messages

        ar = i18n.language("ar")
        self.assertEqual(messages.received(ar, True, 1), "شكرًا لك. وصلتنا رسالتك ومستند واحد.")
        self.assertEqual(messages.received(ar, True, 2), "شكرًا لك. وصلتنا رسالتك ومستندان.")
        self.assertEqual(messages.received(ar, False, 11), "شكرًا لك. وصلنا 11 مستندًا.")
        self.assertEqual(ar.ngettext("{n} new reply", "{n} new replies", 1).format(n=1), "رد جديد واحد")
        for n in (1, 2):
            self.assertNotIn(str(n), messages.received(ar, True, n))


class CountsTests(unittest.TestCase):
    """Issue 17 §7: every count a source reads goes through the plural forms of its language."""

    # Placeholders that stand for a count; "{n} MB" is a unit symbol, not inflected in any of
    # the nine languages (MB, Mo, МБ, ميغابايت, مگابایت...), and "{limit}" follows a noun already said.
    COUNTS = {"{n}", "{count}", "{minutes}", "{chars}", "{days}"}

    def test_no_count_is_said_with_a_singular_message(self):
        used = used_messages()
        self.assertIn(("{n} reply deleted.", "{n} replies deleted."), used)
        singular_counts = {m: where for m, where in used.items()
                           if isinstance(m, str) and m != "{n} MB" and set(_PLACEHOLDER.findall(m)) & self.COUNTS}
        self.assertEqual(singular_counts, {})

    def test_minutes_characters_days_and_replies_in_arabic(self):
        from deaddrop.web.source import messages, pages

        ar = i18n.language("ar")
        ctx = pages.PageContext(lang=ar, site_name="x")
        said = {n: ctx._(messages.INACTIVE, minutes=n) for n in (1, 2, 5, 11, 100, 120)}
        self.assertIn("بعد دقيقة واحدة من", said[1])
        self.assertIn("بعد دقيقتين من", said[2])
        self.assertIn("بعد 5 دقائق من", said[5])
        self.assertIn("بعد 11 دقيقة من", said[11])
        self.assertIn("بعد 100 دقيقة من", said[100])
        self.assertIn("بعد 120 دقيقة من", said[120])
        self.assertTrue(all(s.endswith("يُرجى تسجيل الدخول مرة أخرى.") for s in said.values()))
        self.assertNotIn("5 دقيقة", said[5])  # the example
        self.assertIn(f"فيها {ctx.number(100_003)} أحرف،", ctx._(messages.TOO_LONG, count=100_003, limit=100_000))
        self.assertIn(f"فيها {ctx.number(100_001)} حرف،", ctx._(messages.TOO_LONG, count=100_001, limit=100_000))
        safety = pages.safety(ctx, 3)
        from deaddrop.web._common.pages import render_sync
        self.assertIn("بعد 3 أيام من وصولها", render_sync(safety).decode())
        self.assertIn("بعد يومين من وصولها", render_sync(pages.safety(ctx, 2)).decode())
        self.assertIn("بعد 30 يومًا من وصولها", render_sync(pages.safety(ctx, 30)).decode())
        self.assertEqual(ctx._(messages.REPLIES_DELETED, count=2), "حُذف ردّان.")
        self.assertEqual(ctx._(messages.REPLIES_DELETED, count=7), "حُذفت 7 ردود.")

    def test_russian_and_the_others_follow_their_rules_too(self):
        from deaddrop.web.source import messages, pages

        ru = pages.PageContext(lang=i18n.language("ru"), site_name="x")
        self.assertIn("через 1 минуту после", ru._(messages.INACTIVE, minutes=1))
        self.assertIn("через 3 минуты после", ru._(messages.INACTIVE, minutes=3))
        self.assertIn("через 120 минут после", ru._(messages.INACTIVE, minutes=120))
        self.assertEqual(ru._(messages.REPLIES_DELETED, count=21), "Удалён 21 ответ.")
        de = pages.PageContext(lang=i18n.language("de"), site_name="x")
        self.assertIn("1 Minute nach", de._(messages.INACTIVE, minutes=1))
        self.assertIn("Dieses Wort steht nicht", de._(messages.NOT_IN_LIST, words="abacsu", count=1))
        self.assertIn("Diese Wörter stehen nicht", de._(messages.NOT_IN_LIST, words="a, b", count=2))
        en = pages.PageContext(lang=i18n.language("en"), site_name="x")
        self.assertEqual(en._(messages.REPLIES_DELETED, count=1), "1 reply deleted.")
        self.assertEqual(en._(messages.REPLIES_DELETED, count=1200), "1,200 replies deleted.")
