from twisted.application.service import ServiceMaker

DeadDrop = ServiceMaker(
    "DeadDrop",
    "deaddrop.tap",
    "An anonymous drop box: source onion service and journalist interface.",
    "deaddrop",
)
