import Foundation
import OutpostProtocol
import OutpostRecords
import Testing

@Suite("Roster CSV")
struct RosterCSVTests {
    let header = "guest_id,name,email,access_type_id,status,check_in_note,arrival_alert_json\n"

    @Test("quoted fields keep commas, quotes and line breaks, and rows keep their line numbers")
    func quoting() throws {
        let text =
            header
            + "g1,\"Ana, Silva\",ana@example.org,vip,registered,\"says \"\"hi\"\"\",\n"
            + "g2,Ben,ben@example.org,general,confirmed,\"two\nlines\",\"{\"\"level\"\":\"\"info\"\"}\"\n"
            + "g3,Chloé,,general,registered,,\n"
        let rows = try RosterCSV.parse(text, event: "ev-1").get()
        #expect(rows.map(\.guestId) == ["g1", "g2", "g3"])
        #expect(rows.map(\.line) == [2, 3, 5])
        #expect(rows[0].fields["name"] == "Ana, Silva")
        #expect(rows[0].fields["check_in_note"] == "says \"hi\"")
        #expect(rows[1].fields["check_in_note"] == "two\nlines")
        #expect(rows[1].fields["arrival_alert_json"] == .object(["level": "info"]))
        #expect(rows[2].fields["arrival_alert_json"] == .null)
        #expect(rows.allSatisfy { $0.fields["event_id"] == "ev-1" })
    }

    @Test("every bad row is reported with its line, and no row is returned")
    func badRows() {
        let text =
            header
            + "g1,Ana,ana@example.org,vip,registered,,\n"
            + "../x,Bad Id,b@example.org,vip,registered,,\n"
            + "g3,,c@example.org,vip,registered,,\n"
            + "g4,Dee,not-an-email,vip,registered,,\n"
            + "g5,Eve,e@example.org,vip,registered,,{broken\n"
            + "g1,Again,a2@example.org,vip,registered,,\n"
            + "g7,Too,few\n"
            + "g8,Fay,f@example.org,vip,sleeping,,\n"
        guard case .failure(let list) = RosterCSV.parse(text, event: "ev") else {
            Issue.record("bad rows were accepted")
            return
        }
        #expect(list.problems.map(\.line) == [3, 4, 5, 6, 7, 8, 9])
        #expect(list.problems[4].message.contains("line 2"))
        #expect(list.description.hasPrefix("line 3: guest_id"))
    }

    @Test("a wrong header is refused", arguments: ["", "a,b,c\n", "guest_id,name,email\n"])
    func badHeader(text: String) {
        guard case .failure(let list) = RosterCSV.parse(text, event: "ev") else {
            Issue.record("accepted")
            return
        }
        #expect(list.problems.first?.line == 1)
    }

    @Test("an unclosed quote is reported")
    func unclosedQuote() {
        guard case .failure(let list) = RosterCSV.parse(header + "g1,\"Ana,a@example.org,vip,registered,,\n", event: "ev") else {
            Issue.record("accepted")
            return
        }
        #expect(!list.problems.isEmpty)
    }

    @Test("a generated roster of any size parses back whole")
    func generated() throws {
        let rows = try RosterCSV.parse(RosterCSV.generate(guests: 5000), event: "ev").get()
        #expect(rows.count == 5000)
        #expect(Set(rows.map(\.guestId)).count == 5000)
        #expect(rows[0].fields["arrival_alert_json"] != .null)
    }
}
