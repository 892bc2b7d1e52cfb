"""What the source interface tells a source outside the page bodies: titles, notices, errors.

Each is an English gettext message id, marked with ``N_`` for extraction and translated where
it is shown (``PageContext._``). Every error after a submit says what went wrong, the limit in
numbers where there is one, that nothing was stored, and where the typed message is now.
"""
from __future__ import annotations

from deaddrop.i18n import numerals
from deaddrop.web.source.i18n import N_, Counted, Language, Np_, fill

# -- titles ------------------------------------------------------------------------------------
T_TRY_AGAIN = N_("Please try again")
T_NOT_STORED = N_("Not stored")
T_OUT_OF_SPACE = N_("Not stored: the server is out of space")
T_SOMETHING_WRONG = N_("Something went wrong")
T_NOT_FOUND = N_("Page not found")
T_NOT_ALLOWED = N_("Not allowed")
T_REFUSED = N_("Request refused")
T_NOTHING_RECEIVED = N_("Nothing received")
T_BUSY = N_("The drop box is busy")
T_CLOSED = N_("This conversation was closed")
T_TOO_LARGE = N_("Too large")

# -- desks (issue 29) ---------------------------------------------------------------------------
CHOOSE_A_DESK = N_("Choose at least one desk.")
CHOICE_SAVED = N_("Your choice is saved.")
SEND_IT_NOW = N_("Your message is in the form below: press Send to send it.")
DESK_FIRST = N_("Your message has not been sent yet: first choose who reads it. It waits for you in the form on "
                "the next page; choose any files again there.")

# -- codename and login --------------------------------------------------------------------------
NOT_RECOGNIZED = N_("Sorry, that is not a recognized codename. Check the words and try again.")
NOT_IN_LIST = Counted((Np_("This word is not in the codename word list, so it is part of no codename: {words}.",
                             "These words are not in the codename word list, so they are part of no codename: {words}."),
                         "count"))
THROTTLED = N_("Too many attempts to log in. Please wait a minute and try again.")
ALREADY_LOGGED_IN = N_("You are already logged in. To make a new codename, log out first.")
CODENAME_ACTIVE = N_("Your codename is active. Remember it: it is the only way back to your replies.")
STALE_CREATE = N_("This page was out of date. Nothing was stored. Please get a new codename.")
NOT_GENERATED = N_("That codename was not made for this visit. Please get a new one.")
NO_NEW_CODENAMES = N_("No new codename can be made at the moment. Nothing was stored. Please try again in a few "
                      "hours.")
GET_NEW_CODENAME = N_("Please get a new codename.")
STALE_LOGIN = N_("This page was out of date. Please enter your codename again.")
# Every count a source reads is said with the language's plural forms (``Counted``).
LOGGED_OUT_AFTER = Np_("For your safety, you were logged out {n} minute after logging in.",
                       "For your safety, you were logged out {n} minutes after logging in.")
INACTIVE = Counted((LOGGED_OUT_AFTER, "minutes"), N_("Please log in again."))
EXPIRED_SUBMIT = Counted((LOGGED_OUT_AFTER, "minutes"), N_("Nothing was stored yet: your message is kept below. "
                                                           "Enter your codename and it will be sent."))

# -- submitting ----------------------------------------------------------------------------------
BUSY = N_("The drop box is busy. Nothing was lost; please try again in a minute.")
STALE_SUBMIT = N_("This form was out of date (for example, it was open in another tab while you logged in "
                  "again). Nothing was stored. Your message is still below: please send it again.")
HONEYPOT = N_("Your submission could not be accepted. Nothing was stored.")
TOO_LONG = Counted((Np_("Your message is too long: it has {n} character, and the limit is {limit}.",
                         "Your message is too long: it has {n} characters, and the limit is {limit}."), "count"),
                   N_("Nothing was stored. It is still below: shorten it or send it in several parts."))
EMPTY = N_("Please write a message or choose a file. Nothing was stored.")
NO_FILES = N_("This drop box does not accept files at the moment. Nothing was stored. Your message is still "
              "below: you can send it without the files.")
TOO_LARGE = N_("Your files are too large: this drop box accepts at most {size} in total. Nothing was stored. "
               "Your message is still below: send it again with smaller files, or without them.")
TOO_LARGE_NOTHING_TYPED = N_("Your files are too large: this drop box accepts at most {size} in total. Nothing was "
                             "stored. Please choose smaller files.")
TOO_LARGE_LOST = N_("Your files are too large: this drop box accepts at most {size} in total. Nothing was "
                    "stored. To get back the message you typed, use your browser's Back button.")
# The files' count is the most one submission takes (``uploads.MAX_FILES``), said as {n}.
AT_MOST_FILES = Np_("This drop box takes at most {n} file in one submission.",
                    "This drop box takes at most {n} files in one submission.")
TOO_MANY_FILES = Counted(N_("You chose too many files."), (AT_MOST_FILES, "limit"),
                         N_("Nothing was stored. Your message is still below: send the files in several "
                            "submissions, or put them in one archive (a .zip file) and send that."))
TOO_MANY_FILES_LOST = Counted(N_("You chose too many files."), (AT_MOST_FILES, "limit"),
                              N_("Nothing was stored. Send the files in several submissions, or put them in one "
                                 "archive (a .zip file) and send that. To get back the message you typed, use your "
                                 "browser's Back button."))
IN_FLIGHT = N_("Another submission from you is still being received. Nothing was stored from this one. Your "
               "message is still below: send it again once the other one has finished.")
BAD_FORM = N_("The form could not be read. Nothing was stored. Your message is still below: please send it "
              "again.")
BAD_FORM_LOST = N_("The form could not be read. Nothing was stored. To get back the message you typed, use your "
                   "browser's Back button.")
NO_ROOM = N_("The drop box has too little free space for files this large right now: it can take at most {size} "
             "at the moment. Nothing was stored. Your message is still below: send it again with smaller files, "
             "or without them.")
NO_ROOM_LOST = N_("The drop box has too little free space for files this large right now: it can take at most "
                  "{size} at the moment. Nothing was stored. To get back the message you typed, use your browser's "
                  "Back button.")
NO_ROOM_AT_ALL = N_("The drop box has no room for files at the moment. Nothing was stored. You can send your "
                    "message without files, or try again later.")
RECEIVED_AFTER_LOGOUT = Counted(
    (Np_("Your session ended while your submission was arriving (for your safety, you are logged out {n} minute after "
         "logging in, or when you log out in another tab).",
         "Your session ended while your submission was arriving (for your safety, you are logged out {n} minutes after "
         "logging in, or when you log out in another tab)."), "minutes"),
    N_("It was received all the same. Log in again to send more or to read replies."))
NOTHING_RECEIVED = N_("Submissions must be sent with the form on your page.")
OUT_OF_SPACE = N_("The server has run out of space. Nothing was stored. Please try again later.")
NOT_STORED = N_("The server could not store your submission. Nothing was stored. Please try again later.")
SOURCE_CLOSED = N_("The newsroom has closed the conversation for this codename and deleted what it held. "
                   "Nothing you just sent was stored. If you want to reach us again, please start over with "
                   "a new codename.")


def received(lang: Language, message: bool, documents: int) -> str:
    """The thank-you notice after a submission."""
    if not documents:
        return lang.gettext("Thank you. We received your message.")
    if message:
        forms = Np_("Thank you. We received your message and {n} document.",
                    "Thank you. We received your message and {n} documents.")
    else:
        forms = Np_("Thank you. We received {n} document.", "Thank you. We received {n} documents.")
    english = forms[0] if documents == 1 else forms[1]
    return fill(lang.ngettext(*forms, documents), english, {"n": numerals.number(documents, lang.code)})

FILES_NOT_CARRIED = N_("Your message was kept. Files cannot be carried over to another language: please choose "
                       "them again.")

# -- replies -------------------------------------------------------------------------------------
REPLY_DELETED = N_("Reply deleted.")
REPLIES_DELETED = Counted((Np_("{n} reply deleted.", "{n} replies deleted."), "count"))
REPLY_NOT_FOUND = N_("That reply was not found. Nothing was deleted.")
STALE_DELETE = N_("This page was out of date. Nothing was deleted. Please try again.")

# -- anything else -------------------------------------------------------------------------------
SOMETHING_WRONG = N_("The server could not handle that request. Nothing was stored unless you saw a "
                     "confirmation.")
NOT_FOUND = N_("There is nothing at this address.")
NOT_ALLOWED = N_("That action is not available this way.")
REFUSED = N_("The request could not be handled.")
BAD_ADDRESS = N_("That address could not be read.")

# -- refusals answered before any route runs (web/_common/site.py, _proxies.py) -----------------
# The English texts there are these message ids: listed here to be extracted and translated.
EARLY_REFUSALS = (
    N_("Too many requests"),
    N_("Too many requests over this connection at once. Wait a few seconds, then reload the page."),
    N_("Too large"),
    N_("That upload is larger than this instance accepts. Nothing was stored."),
    N_("That request is too large."),
    N_("Request refused"),
    N_("The request's headers are too large."),
    N_("Unsupported upload"),
    N_("This address does not accept uploads."),
    N_("Bad address"),
    N_("Something went wrong"),
    N_("The server could not handle that request. Nothing you sent was stored unless you saw a confirmation."),
    N_("Please use Tor Browser"),
    N_("You reached this page through a proxy service (tor2web), which can see what you send and who you are. "
       "Nothing was stored. Download Tor Browser from torproject.org and open this address in it."),
)
