import Foundation
import GRDB
import OutpostApps
import OutpostClient
import OutpostProtocol
import OutpostTesting
import Testing

@testable import OutpostServer

/// A real `outpost serve` and a real device store, driven by real `outpost device` processes over a socket.
@Suite("Device end to end")
struct DeviceEndToEndTests {
    @Test("offline writes, a device killed with SIGKILL mid-replay, a restart: nothing lost, nothing doubled, order kept")
    func killDuringReplay() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-e2e-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("server").path
        let store = root.appendingPathComponent("device/device.sqlite").path
        let port = String(try TestPostgres.freePort())
        let serveArguments = ["serve", "--port", port, "--data-dir", data]

        // Given a device set up against a running server,
        var server = try await OutpostProcess.start(serveArguments)
        _ = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
        let token = try await OutpostProcess.run(["token", "--tenant", "acme", "--user", "ana", "--role", "staff", "--data-dir", data])
            .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let setup = try await OutpostProcess.run(
            ["device", "init", "--server", "http://127.0.0.1:\(port)", "--token", token, "--device-id", "dev-e2e", "--store", store])
        #expect(setup.status == 0, "\(setup.stderr)")

        // when the server goes away, writes still succeed locally and say they are pending,
        #expect(await server.stop() == 0)
        let offlinePut = try await OutpostProcess.run(["device", "put", "notes", "first", "text=hello", "--store", store])
        #expect(offlinePut.status == 0, "\(offlinePut.stderr)")
        #expect(offlinePut.stdout.contains("pending sync"))
        let written = ["first"] + (try await LocalStore.queueOfflineNotes(at: store, deviceId: "dev-e2e", count: 1500))

        // and when it returns, a replay killed with SIGKILL part way through
        server = try await OutpostProcess.start(serveArguments)
        _ = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
        let replay = try await OutpostProcess.start(["device", "sync", "--store", store])
        _ = try await replay.waitFor(#"pushed chunk (3):"#)
        _ = await replay.stop(SIGKILL)

        // then the relaunched device finishes the job,
        let resumed = try await OutpostProcess.run(["device", "sync", "--store", store])
        #expect(resumed.status == 0, "\(resumed.stdout) \(resumed.stderr)")
        #expect(resumed.stdout.contains("0 failed"))
        let pending = try await OutpostProcess.run(["device", "records", "--pending", "--store", store])
        #expect(pending.stdout.contains("no records"))

        // and the server holds each write exactly once, in the device's order.
        let pool = try DatabasePool(path: data + "/" + SQLiteStorage.databaseFileName)
        let (mutations, distinctKeys, order, versions) = try await pool.read { db in
            (
                try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM mutations") ?? 0,
                try Int.fetchOne(db, sql: "SELECT COUNT(DISTINCT idempotency_key) FROM mutations") ?? 0,
                try String.fetchAll(db, sql: "SELECT record_id FROM records ORDER BY change_seq"),
                try Int64.fetchAll(db, sql: "SELECT DISTINCT version FROM records")
            )
        }
        #expect(mutations == written.count)
        #expect(distinctKeys == written.count)
        #expect(order == written)
        #expect(versions == [1])
        #expect(await server.stop() == 0)
        // No token and no payload value in the server's log.
        #expect(!server.stderr.contains(token))
        #expect(!server.stderr.contains("hello"))
    }
}

extension DeviceEndToEndTests {
    @Test("`device run` stays up offline, syncs by itself when the server comes back, and stops on SIGINT")
    func runLoop() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-e2e-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("server").path
        let store = root.appendingPathComponent("device/device.sqlite").path
        let port = String(try TestPostgres.freePort())
        let token = try await OutpostProcess.run(["token", "--tenant", "acme", "--user", "ana", "--role", "staff", "--data-dir", data])
            .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(
            try await OutpostProcess.run(
                ["device", "init", "--server", "http://127.0.0.1:\(port)", "--token", token, "--store", store]).status == 0)
        // Written while the server is down: the app was killed offline.
        for id in ["a", "b", "c"] {
            let put = try await OutpostProcess.run(["device", "put", "notes", id, "n=1", "--store", store])
            #expect(put.stdout.contains("pending sync"))
        }
        let device = try await OutpostProcess.start(
            ["device", "run", "--probe-interval", "1s", "--retry-interval", "2s", "--store", store])
        _ = try await device.waitFor("offline: (3 records waiting to sync)")
        // Relaunched online, it syncs with no user action.
        let server = try await OutpostProcess.start(["serve", "--port", port, "--data-dir", data])
        _ = try await server.waitFor(#"listening on http://127\.0\.0\.1:(\d+)"#)
        _ = try await device.waitFor("online: (All records synced)")
        #expect(await device.stop(SIGINT) == 0)
        #expect(device.stdout.contains("device stopped"))
        #expect(await server.stop() == 0)
    }

    @Test("a live query of an app sees what another process, an `outpost device` command, saves in the same store")
    func liveQueryAcrossProcesses() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("outpost-live-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("server").path
        let url = root.appendingPathComponent("device/device.sqlite")
        let token = try await OutpostProcess.run(["token", "--tenant", "acme", "--user", "ana", "--role", "staff", "--data-dir", data])
            .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        // No server runs: the command saves offline.
        let port = String(try TestPostgres.freePort())
        let setup = try await OutpostProcess.run(
            ["device", "init", "--server", "http://127.0.0.1:\(port)", "--token", token, "--device-id", "dev-live", "--store", url.path])
        #expect(setup.status == 0, "\(setup.stderr)")

        let store = try LocalStore(url: url, keys: LocalStore.defaultKeys(for: url), schema: .fieldApps)
        let notes = store.observeRecords(collection: "notes", checkingOtherProcessesEvery: .milliseconds(50))
        let seen = Task { () async throws -> LocalRecord? in
            for try await records in notes where records.map(\.recordId) == ["n1"] { return records.first }
            return nil
        }
        let put = try await OutpostProcess.run(["device", "put", "notes", "n1", "text=from the CLI", "--store", url.path])
        #expect(put.status == 0, "\(put.stderr)")
        let record = try await seen.value(within: testWaitLimit, "the other process's record in the live query")
        #expect(record?.fields["text"] == "from the CLI")
        #expect(record?.syncStatus == .pending)
    }
}
